"""The chaos harness's requeuing operator (chaos.requeuer): its requests are
signed as a standby's dashboard signs them, paced or not, and it picks jobs
likely running or dead."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chaos.cluster import LEASE_SECONDS, SECRET_KEY
from chaos.history import Call
from chaos.purger import signed
from chaos.requeuer import candidates, waiting
from engine import Policy
from engine.ops import make_due_op, requeue_op
from engine.wire import operator_from_json, operator_json
from queueadmin.api import forward

if TYPE_CHECKING:
    from pytest_django.fixtures import SettingsWrapper


def test_a_paced_requeue_is_signed_as_a_standby_signs_it(settings: SettingsWrapper) -> None:
    settings.SECRET_KEY = SECRET_KEY
    op = requeue_op(["a", "b"], expect=["running", "dead"], per_second=2.5)

    assert forward.unsign(signed(op).decode(), policy=Policy()).op == op


def call(op: str, args: dict[str, Any], answer: Any, *, end: float = 1.0) -> Call:
    return Call(id=0, client="c", op=op, node="n", args=args, start=end - 0.5, end=end, status=200, answer=answer)


def test_candidates_are_recent_unacknowledged_leases_and_dead_letters_not_requeued_since() -> None:
    now = 100.0
    calls = [
        call("claim", {}, {"jobs": [{"id": "old", "lease": "Lo"}]}, end=now - LEASE_SECONDS - 1),
        call("claim", {}, {"jobs": [{"id": "r1", "lease": "L1"}, {"id": "r2", "lease": "L2"},
                                    {"id": "d1", "lease": "Ld1"}, {"id": "d2", "lease": "Ld2"}]}, end=now - 2),
        call("claim", {"dropped": True}, {"jobs": [{"id": "lost", "lease": "Lx"}]}, end=now - 2),
        call("complete", {"job": "r2", "lease": "L2"}, {"ok": True}, end=now - 1),
        call("fail", {"job": "d1", "lease": "Ld1"}, {"status": "dead", "not_before": None}, end=now - 1),
        call("fail", {"job": "d2", "lease": "Ld2"}, {"status": "dead", "not_before": None}, end=now - 1),
        call("requeue", {"jobs": ["d2"]}, {"result": ["d2"], "seq": 3}, end=now - 0.5),
    ]

    assert candidates(calls, now) == (["r1"], ["d1"])


def test_run_now_picks_delayed_jobs_with_time_left_and_not_leased_and_is_signed_as_the_dashboards() -> None:
    now = 100.0
    calls = [
        Call(id=0, client="p", op="push", node="n", start=now - 1, end=now - 0.9, status=201,
             args={"jobs": [{"id": "waits", "delay_seconds": 4.0}, {"id": "now", "payload": 1}]}, answer=None),
        Call(id=1, client="p", op="push", node="n", start=now - 3.8, end=now - 3.7, status=201,
             args={"jobs": [{"id": "almost", "delay_seconds": 4.0}]}, answer=None),
        Call(id=2, client="p", op="push", node="n", start=now - 1, end=now - 0.9, status=201,
             args={"jobs": [{"id": "leased", "delay_seconds": 4.0}]}, answer=None),
        call("claim", {}, {"jobs": [{"id": "leased", "lease": "L"}]}, end=now - 0.5),
    ]

    assert waiting(calls, now) == ["waits"]
    op = make_due_op(["waits"], expect=["pending"])
    assert operator_from_json(operator_json(op), policy=Policy()) == op
