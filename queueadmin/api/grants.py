"""What an API token may do: its grant.

``QUEUE_API_TOKEN`` and an :class:`~queueadmin.models.ApiToken` without a
scope may do everything, as every token could before scopes existed. An
``ApiToken`` may be narrowed, in Django admin, to:

* **queues**: shell-style patterns of queue names (``billing``,
  ``billing-*``); the token pushes to, claims from and reads jobs of those
  queues only;
* **calls**: pushing (a producer: ``POST /api/v1/jobs``) or working (a
  worker: claim, heartbeat, complete, fail, and their batches), or both.

The rules, checked by each endpoint before anything is submitted, so a
refused request changes nothing: the call before the body is read, the
queues once the body named them.

* a push needs ``may_push`` and the push's queue in scope;
* a claim (alone, or riding an ack) needs ``may_work`` and every queue it
  names in scope;
* a heartbeat, complete or fail (alone, or an item of a batch) needs
  ``may_work``, and its job's queue in scope: a job of another queue is
  ``job_not_found`` whatever its lease (checked as the operation is applied,
  :func:`engine.ops.scoped`), so a lease that leaked from another worker
  fleet is of no use, and a wrong lease tells nothing;
* ``GET /api/v1/jobs/<id>`` needs either right, and answers ``404
  job_not_found`` for a job of a queue out of scope, as for a job that does
  not exist, so a narrowed token cannot learn what other queues hold;
* ``GET /api/v1/document`` and ``/metrics`` show every queue, so they need a
  token that is not narrowed at all.

A refusal is ``403 forbidden`` with a message naming the token, the call or
queue, and the scope; clients raise :class:`engine.Forbidden`, which a
worker treats as fatal, as a wrong token. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

from engine.ops import QueueScope
from queueadmin.api.errors import ApiError

__all__ = ["FULL", "Call", "Grant", "parse_patterns"]

#: What an endpoint does, as a token's scope counts it (None: a read, which any good token may make).
Call = Literal["push", "work"]

# Patterns are separated by commas or whitespace; queue names hold neither.
_SEPARATORS = re.compile(r"[\s,]+")


def parse_patterns(text: str) -> tuple[str, ...] | None:
    """The patterns written in an ``ApiToken.queues`` field, in order and
    without repeats; None for a blank field (every queue)."""
    patterns = tuple(dict.fromkeys(p for p in _SEPARATORS.split(text) if p))
    return patterns or None


@dataclass(frozen=True, slots=True)
class Grant:
    """What one token may do. ``name`` is the token's (None for
    ``QUEUE_API_TOKEN``); ``patterns`` None means every queue."""

    name: str | None = None
    may_push: bool = True
    may_work: bool = True
    patterns: tuple[str, ...] | None = None

    @property
    def full(self) -> bool:
        """Whether nothing is narrowed: every call on every queue."""
        return self.may_push and self.may_work and self.patterns is None

    @property
    def scope(self) -> QueueScope | None:
        """What a lease call made with this token may touch
        (:func:`engine.ops.scoped`): None for every queue."""
        return None if self.patterns is None else self.covers

    def covers(self, queue: str) -> bool:
        """Whether ``queue`` is in this token's scope (case-sensitive, as queue names are)."""
        return self.patterns is None or any(fnmatchcase(queue, p) for p in self.patterns)

    def require(self, call: Call | None) -> None:
        """Return if this token may make ``call`` at all (before its queues
        are known); else raise 403 forbidden."""
        if call == "push":
            self.require_push()
        elif call == "work":
            self.require_work()

    def require_push(self, queue: str | None = None) -> None:
        """Return if this token may push (to ``queue``, if given); else raise 403 forbidden."""
        if not self.may_push:
            raise self._refusal("may not push jobs: it is for workers only")
        self._require_queues("push to", () if queue is None else (queue,))

    def require_work(self, queues: Iterable[str] = ()) -> None:
        """Return if this token may work jobs (and claim from every queue of
        ``queues``); else raise 403 forbidden."""
        if not self.may_work:
            raise self._refusal("may not claim or acknowledge jobs: it is for pushing only")
        self._require_queues("claim from", queues)

    def require_full(self, what: str) -> None:
        """Return if this token is not narrowed at all; else raise 403
        forbidden: ``what`` shows every queue."""
        if not self.full:
            raise self._refusal(f"may not read {what}, which shows every queue; that needs a token that is not "
                                "limited to some queues or calls")

    def _require_queues(self, verb: str, queues: Iterable[str]) -> None:
        outside = [q for q in queues if not self.covers(q)]
        if outside:
            assert self.patterns is not None
            raise self._refusal(f"may not {verb} {', '.join(map(repr, outside))}: its queues are "
                                f"{' '.join(self.patterns)}")

    def _refusal(self, why: str) -> ApiError:
        who = "this token" if self.name is None else f"the API token {self.name!r}"
        return ApiError("forbidden", f"{who} {why}")


#: The grant of ``QUEUE_API_TOKEN`` and of a database token without a scope.
FULL = Grant()
