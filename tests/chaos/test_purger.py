"""The chaos harness's operator (chaos.purger): its requests are signed as a
standby's dashboard signs them, and it picks jobs still waiting."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chaos.cluster import SECRET_KEY
from chaos.history import Call
from chaos.purger import candidates, signed
from engine import Policy
from engine.ops import Purge
from queueadmin.api import forward

if TYPE_CHECKING:
    from pytest_django.fixtures import Settings as SettingsWrapper


def test_a_purge_is_signed_as_a_standby_signs_it(settings: SettingsWrapper) -> None:
    settings.SECRET_KEY = SECRET_KEY
    op = Purge(job_ids=("a", "b"), expect=("pending", "pending"))

    first, second = forward.unsign(signed(op).decode(), policy=Policy()), forward.unsign(signed(op).decode(),
                                                                                          policy=Policy())

    assert first.op == op and second.op == op
    assert first.nonce != second.nonce  # each request runs once: a retry is signed again


def test_candidates_are_acknowledged_jobs_no_claim_leased_oldest_first() -> None:
    def call(op: str, args: dict[str, object], answer: object, status: int = 200) -> Call:
        return Call(id=0, client="c", op=op, node="n", args=args, start=0.0, end=1.0, status=status, answer=answer)

    calls = [call("push", {"jobs": [{"id": "j1"}, {"id": "j2"}]}, {"ids": ["j1", "j2"]}, 201),
             call("push", {"jobs": [{"id": "j3"}]}, {"error": "store_unavailable"}, 503),
             call("push", {"jobs": [{"id": "j4"}]}, {"ids": ["j4"]}, 201),
             call("claim", {"worker": "w"}, {"jobs": [{"id": "j2", "lease": "L"}]})]

    assert candidates(calls) == ["j1", "j4"]
