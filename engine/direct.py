"""Layer 1: every operation is its own read, change and conditional write.

Correct under any number of concurrent writers, and slow: one read and one
write per operation, and under contention most writes lose the race. This is
the correctness and benchmark baseline.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import orjson

from engine.backoff import READ_RETRIES, jittered
from engine.cas import state_of, write_state
from engine.client import QueueClient, unwrap
from engine.document import QueueState
from engine.errors import EngineError, PreconditionFailed, StoreUnavailable
from engine.lineage import Presence
from engine.model import new_writer_id, utc_now
from engine.optypes import Operation
from engine.parsing import parse_document
from engine.policy import DOCUMENT_KEY, Policy
from engine.stores.base import ObjectStore
from engine.transitions import apply_batch

log = logging.getLogger(__name__)

DEFAULT_MAX_RETRIES = 1000
DEFAULT_BACKOFF_SECONDS = 0.002
DEFAULT_BACKOFF_CAP_SECONDS = 0.1


class DirectClient(QueueClient):
    """Read, apply, write conditionally; on a lost race back off with jitter and retry.

    Thread-safe (each call is independent). An ambiguous write (timeout, 5xx)
    is settled by re-reading: if the document records this client's commit,
    the operation landed and is answered; otherwise it is retried. A read
    that fails with StoreUnavailable is tried again, up to ``READ_RETRIES``
    times in a row, then raised.

    ``claim`` accepts ``wait_seconds`` (the :class:`QueueClient` contract) and
    ignores it: it answers as soon as its write lands, with [] if nothing is
    claimable.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        key: str = DOCUMENT_KEY,
        policy: Policy | None = None,
        clock: Callable[[], datetime] = utc_now,
        writer_id: str | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        backoff_seconds: float = DEFAULT_BACKOFF_SECONDS,
        backoff_cap_seconds: float = DEFAULT_BACKOFF_CAP_SECONDS,
    ) -> None:
        self.store = store
        self.key = key
        self.policy = policy or Policy()
        self.clock = clock
        self.writer_id = writer_id or new_writer_id()
        self.max_retries = max_retries
        self.backoff_seconds = backoff_seconds
        self.backoff_cap_seconds = backoff_cap_seconds
        self.lost_races = 0
        self.presence = Presence(store, key, writer=self.writer_id)  # I10: never re-create a lost document
        self._calls = itertools.count(1)

    def _read(self) -> QueueState:
        return state_of(self.key, self.store.get(self.key), policy=self.policy, presence=self.presence)

    def execute(self, op: Operation) -> Any:
        [result] = self._commit([op])
        return unwrap(result)

    def execute_many(self, ops: Sequence[Operation]) -> list[Any]:
        """Apply every operation of ``ops`` in one read and one conditional
        write (retried as a whole on a lost race), and return one outcome per
        operation: its result or the QueueError it was refused with. Should
        an operation fail unexpectedly while applied (I8), the operations are
        run one by one instead (the default :meth:`QueueClient.execute_many`),
        so that it alone is refused. Raises StoreError when the write could
        not be made within the retries, and DocumentError, as execute does."""
        ops = list(ops)
        if not ops:
            return []
        try:
            return self._commit(ops)
        except EngineError:  # the store's or the document's: the whole call failed
            raise
        except Exception:
            log.exception("DirectClient: a batch of %d operations failed; running them one by one", len(ops))
            return super().execute_many(ops)

    def _commit(self, ops: list[Operation]) -> list[Any]:
        """One read, change and conditional write for ``ops``; their outcomes."""
        # Each call writes under its own writer id: threads sharing this client
        # must never mistake one another's commit for their own.
        writer = f"{self.writer_id}/{next(self._calls)}"
        # Writes whose outcome we never learned (lost-race reply or timeout),
        # by sequence number: a retried PUT can fail although an earlier
        # attempt of it landed, and the next read tells.
        unsettled: dict[int, Any] = {}
        last_error: EngineError | None = None
        failed_reads = 0
        for attempt in range(self.max_retries + 1):
            try:
                state = self._read()
            except StoreUnavailable as exc:
                last_error = exc
                # The document was created by another thread or process
                # between our read of "absent" and the check that follows it
                # (Presence.gone), or the store failed for a moment: reading
                # again sees it. A few times only: a store that is down is
                # reported at once, not after max_retries.
                failed_reads += 1
                if failed_reads > READ_RETRIES:
                    raise
                self._sleep(attempt)
                continue
            failed_reads = 0
            for seq, earlier in unsettled.items():
                if state.has_commit(writer, seq):
                    return earlier  # type: ignore[no-any-return]
            now = self.clock()
            seq = state.seq + 1
            results = apply_batch(state, ops, now)
            if not state.dirty:
                return results
            parts = state.encode(seq=seq, writer=writer, now=now)
            try:
                write_state(self.store, self.key, parts, etag=state.etag)
            except (PreconditionFailed, StoreUnavailable) as exc:
                unsettled[seq] = results
                last_error = exc
                self.lost_races += isinstance(exc, PreconditionFailed)
                self._sleep(attempt)
                continue
            if state.etag is None:
                self.presence.found(seq=seq)  # we created it: write its creation marker
            return results
        kind = type(last_error) if isinstance(last_error, StoreUnavailable) else PreconditionFailed
        raise kind(f"{self.key}: gave up after {self.max_retries} retries: {last_error}")

    def _sleep(self, attempt: int) -> None:
        time.sleep(jittered(attempt, self.backoff_seconds, self.backoff_cap_seconds))

    def document(self) -> dict[str, Any]:
        blob = self.store.get(self.key)
        if blob is None:
            return {}
        parse_document(self.key, blob.data, policy=self.policy)  # refuse what we would refuse to write
        result: dict[str, Any] = orjson.loads(blob.data)
        return result
