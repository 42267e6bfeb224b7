"""The group committer's writes: applying operations to the in-memory
state, writing it, and settling each write, recovering after one that failed.

:class:`CommitWrites` is a base class of :class:`~engine.committer.GroupCommitter`
holding the steps its writer thread's loop (:mod:`engine.committer`) takes
on the state and the store: apply new operations (``_apply``; one that
breaks its batch is refused alone by ``_isolate``), start a write
(``_start_write``; its put runs on the I/O thread, ``_put``), settle a
finished one (``_finish``) and, after a failed write, read the document
again to learn whether it landed after all and re-apply what did not
(``_recover``, ``_load_retrying``, ``_load``); the departures and dropped
segments of a landed write go to the listeners (``_report_departures``).
Every field it reads is the committer's, declared below.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from engine.cas import state_of, write_state
from engine.document import QueueState
from engine.errors import CommitterStopped, EngineError, PreconditionFailed, StoreUnavailable
from engine.isolation import reapply_alone
from engine.lineage import Presence
from engine.model import Departure
from engine.pending import CommitStats, Pending, Write, answer, fail, printable
from engine.policy import Policy
from engine.stores.base import ObjectStore
from engine.transitions import apply_batch

__all__ = ["HEDGE_FACTOR", "HEDGE_SAMPLES", "HEDGE_WINDOW", "MAX_STRAGGLERS", "CommitWrites", "verdict"]

# Hedged writes (CommitWrites._hedge): a write sends its hedge once it has
# taken this many times the median of the last landed writes (judged once
# HEDGE_SAMPLES have landed, over the last HEDGE_WINDOW). The median, not a
# high percentile ("The Tail at Scale" hedges at the 95th): a store whose
# requests stall more often than one in twenty would lift a 95th percentile
# into the stalls and stop hedging exactly when it helps most (a test with 3 %
# of writes held 0.4 s, whose first writes drew 8 %, hedged none in time).
# The extra requests are bounded by the stalls themselves and MAX_STRAGGLERS.
HEDGE_FACTOR = 3.0
HEDGE_SAMPLES = 32
HEDGE_WINDOW = 128
# Attempts of earlier writes still out (stragglers) beyond which no hedge is
# sent. One: a stalled request does not keep the next writes from hedging
# (python -m bench hedge: 2 % of writes held 1 s; with none allowed, the held
# writes in the second after a straggler went unhedged), but a store slow as a
# whole is not sent ever more requests. The committer's I/O threads:
# MAX_STRAGGLERS + 2.
MAX_STRAGGLERS = 1

log = logging.getLogger("engine.committer")  # where the committer has always logged


class CommitWrites:
    """The writes of :class:`~engine.committer.GroupCommitter` (see the module)."""

    # The committer's fields this half reads or sets (see GroupCommitter.__init__).
    store: ObjectStore
    key: str
    policy: Policy
    clock: Callable[[], datetime]
    writer_id: str
    max_retries: int
    on_lost_race: Callable[[QueueState], None] | None
    on_load: Callable[[QueueState], None] | None
    on_commit: Callable[[QueueState], None] | None
    on_write: Callable[[QueueState], None] | None
    on_departures: Callable[[list[Departure]], None] | None
    on_segments_dropped: Callable[[list[str]], None] | None
    presence: Presence
    stats: CommitStats
    committed_seq: int
    _lock: threading.Lock
    _cond: threading.Condition
    _state: QueueState | None
    _committed: tuple[str | None, list[bytes]] | None
    _unsettled: list[Write]
    _last_seq: int
    _io: ThreadPoolExecutor | None
    hedge_seconds: float
    _attempts_out: int
    _put_times: deque[float]
    # The committer's own method (engine.committer), next to the constant it reads.
    _backoff: Callable[[int], None]

    def _apply(self, staged: list[Pending], new: list[Pending]) -> list[Pending]:
        """Apply ``new`` on top of the state, which already holds ``staged``
        (reading it first if there is none). Returns the operations to write
        next: ``staged + new``, less any refused alone (see :meth:`_isolate`)."""
        if self._state is None:
            self._state = self._load_retrying()
        try:
            results = apply_batch(self._state, [p.op for p in new], self.clock())
        except Exception as exc:
            return self._isolate(staged + new, exc)
        for pending, result in zip(new, results, strict=True):
            pending.result = result
        return staged + new

    def _isolate(self, batch: list[Pending], exc: BaseException) -> list[Pending]:
        """Something unexpected escaped while applying or encoding ``batch``
        (I8), so the state may be half changed: throw it away and find the
        culprits on a fresh read (:func:`~engine.isolation.reapply_alone`),
        refusing each alone with OperationFailed. Returns the others, applied
        to the new state (to be written). Raises what reading raises (the
        caller then fails the whole batch: it cannot be written anyway).
        """
        log.error("group commit: a batch of %d operation(s) failed to apply or encode (%s); "
                  "isolating the culprit", len(batch), printable(repr(exc)), exc_info=exc)
        self._state = None
        self._state, remaining = reapply_alone(
            batch, load=self._load_retrying, clock=self.clock, writer_id=self.writer_id,
            refuse=lambda bad, error: fail([bad], error, self.stats),
        )
        return remaining

    def _start_write(self, batch: list[Pending]) -> Write | None:
        """Encode the state and start writing it for ``batch``. If nothing
        changed, answer ``batch`` now (every write before it has landed) and
        return None. An encoding error isolates the culprit (see :meth:`_isolate`)."""
        state = self._state
        if state is None or not state.dirty:
            answer(batch, self.stats)
            return None
        seq = max(state.seq, self._last_seq) + 1
        try:
            parts = state.encode(seq=seq, writer=self.writer_id, now=self.clock())
        except Exception as exc:
            batch = self._isolate(batch, exc)
            state = self._state
            assert state is not None
            if not state.dirty:
                answer(batch, self.stats)
                return None
            seq = max(state.seq, self._last_seq) + 1
            parts = state.encode(seq=seq, writer=self.writer_id, now=self.clock())  # probed by _isolate
        self._last_seq = seq
        write = Write(batch, seq, parts, state)
        write.departures = state.take_departures()
        write.dropped_segments = state.take_dropped_segments()
        write.if_match = if_match = state.etag
        write.created = if_match is None
        write.hedge_at = self._hedge_at(write.started)
        state.encoded(seq=seq, writer=self.writer_id)
        assert self._io is not None
        with self._lock:
            self._attempts_out += 1
        try:
            self._io.submit(self._put, write, if_match)
        except RuntimeError as exc:
            # The interpreter is exiting: concurrent.futures' own exit hook
            # stops the I/O thread before daemon threads such as this writer
            # stop (an embedded broker's node ending with its process).
            # Nothing was sent; the batch fails as a stopped committer's does,
            # without a traceback in the log.
            with self._lock:
                self._attempts_out -= 1
            raise CommitterStopped(f"the process is exiting; nothing more is written ({exc})") from exc
        if self.on_write is not None:
            try:
                self.on_write(state)
            except Exception:  # a listener's bug must not break commits
                log.exception("on_write listener failed")
        return write

    def _put(self, write: Write, if_match: str | None, attempt: int = 0) -> None:
        """Runs on an I/O thread: one attempt at ``write``, the first (0) or
        its hedge (1, see :meth:`_hedge`), both conditioned on ``if_match``.

        The write is decided by the first attempt that lands; or, once every
        attempt sent has answered without landing, by :func:`verdict`. An
        attempt that answers after the write was decided (a straggler) is
        ignored: conditioned on a version the decided write has moved past
        or will be re-read against, it cannot land over anything (I3)."""
        etag: str | None = None
        error: EngineError | None = None
        try:
            etag = write_state(self.store, self.key, write.parts, etag=if_match)
        except EngineError as exc:
            error = exc
        except Exception as exc:  # a bug in a store: report it as a failed write
            log.exception("store put failed unexpectedly")
            error = StoreUnavailable(f"put failed: {exc!r}")
        with self._cond:
            self._attempts_out -= 1
            write.answers += 1
            if write.decided is not None:
                return  # a straggler
            if error is not None:
                write.failures.append(error)
                error = verdict(write)
                if error is None:
                    return  # the other attempt may still land: wait for it
            write.decided = attempt
            write.etag, write.error = etag, error
            if error is not None or not write.created:
                write.done = True
                self._cond.notify()
                return
        try:
            self.presence.found(seq=write.seq)  # a create landed: the creation marker (I10)
        except Exception:  # the marker is written again on the next read
            log.exception("writing the creation marker failed")
        with self._cond:
            write.done = True
            self._cond.notify()

    def _hedge_at(self, started: float) -> float | None:
        """When a write started at ``started`` (monotonic) sends its hedge:
        once it has taken HEDGE_FACTOR times the median of the last landed
        writes, and at least ``hedge_seconds``. None: no hedge (hedging is
        off, or fewer than HEDGE_SAMPLES writes have landed to judge by)."""
        times = self._put_times
        if self.hedge_seconds <= 0 or len(times) < HEDGE_SAMPLES:
            return None
        return started + max(self.hedge_seconds, HEDGE_FACTOR * statistics.median(times))

    def _hedge(self, write: Write) -> float | None:
        """Called by the writer thread holding the lock while ``write`` is in
        flight: send its hedge if it is due, the same conditional PUT again,
        so that one slow request (a stalled connection, a slow store node)
        does not hold every caller of the write (Dean and Barroso, "The Tail
        at Scale"). Returns the seconds until the hedge is due, or None when
        none will be sent. No hedge while more than MAX_STRAGGLERS attempts
        of earlier writes are still out: the store is slow as a whole, and
        more requests would not help."""
        due = write.hedge_at
        if due is None or write.decided is not None:
            return None
        wait = due - time.monotonic()
        if wait > 0:
            return wait
        write.hedge_at = None
        if self._attempts_out - (write.attempts - write.answers) > MAX_STRAGGLERS:
            return None
        write.attempts += 1
        self._attempts_out += 1
        assert self._io is not None
        try:
            self._io.submit(self._put, write, write.if_match, 1)
        except RuntimeError:  # the interpreter is exiting (see _start_write): no hedge
            write.attempts -= 1
            self._attempts_out -= 1
            return None
        self.stats.hedged += 1
        log.debug("group commit: write %d slow after %.3f s, sending it again", write.seq,
                  time.monotonic() - write.started)
        return None

    def _finish(self, done: Write, staged: list[Pending]) -> tuple[list[Pending], list[Pending]]:
        """Settle a finished write. Returns the operations still to be written
        and those now durable (to be answered)."""
        if done.error is None:
            assert done.etag is not None
            # Whatever this state object held when it was encoded is in the store now.
            done.state.landed_seq = max(done.state.landed_seq, done.seq)
            if self._state is done.state:
                self._state.etag = done.etag
            # Otherwise the state was read again meanwhile (after an error):
            # it keeps the ETag it was read with, so a write built on it
            # cannot land over this one; it loses the race and re-applies.
            self.committed_seq = done.seq
            self._unsettled.clear()  # an older failed write can no longer land
            self._committed = (done.etag, done.parts)
            seconds = time.monotonic() - done.started
            self.stats.landed(seconds=seconds, size=sum(map(len, done.parts)), operations=len(done.batch))
            self._put_times.append(seconds)
            if done.decided == 1:
                self.stats.hedges_landed += 1
            if self.on_commit is not None:
                try:
                    self.on_commit(done.state)
                except Exception:  # a listener's bug must not break commits
                    log.exception("on_commit listener failed")
            self._report_departures(done)
            return staged, done.batch
        if not isinstance(done.error, PreconditionFailed | StoreUnavailable):
            raise done.error
        return self._recover(done, staged)

    def _recover(self, failed: Write, staged: list[Pending]) -> tuple[list[Pending], list[Pending]]:
        """A write failed: re-read, find out whether it landed after all, and
        re-apply whatever did not land on top of what is really there."""
        self._state = None
        if isinstance(failed.error, StoreUnavailable):
            self.stats.ambiguous += 1
        self._unsettled.append(failed)
        if len(self._unsettled) > self.max_retries:
            # Raised to the guarded step, which fails the batch and forgets
            # the unsettled writes (reporting what they dropped as doubtful).
            raise StoreUnavailable(f"{self.key}: could not commit after {self.max_retries} attempts")
        if len(self._unsettled) > 1:
            self._backoff(len(self._unsettled))
        fresh = self._load_retrying()
        landed = next((w for w in self._unsettled if fresh.has_commit(self.writer_id, w.seq)), None)
        redo = failed.batch + staged
        durable: list[Pending] = []
        if landed is not None:
            # A reply was lost but the write happened (at most one of the
            # unsettled writes can have landed: each was conditioned on a
            # version that excluded the others).
            self._unsettled.clear()
            self._state = fresh
            durable = landed.batch
            self._report_departures(landed)
            answered = set(map(id, durable))
            redo = [p for p in redo if id(p) not in answered]
        else:
            self._state = fresh
            if isinstance(failed.error, PreconditionFailed):
                self.stats.lost_races += 1
                if self.on_lost_race is not None:
                    self.on_lost_race(fresh)  # may raise to fail the batch (a fenced broker)
        if redo:
            redo = self._apply([], redo)
        return redo, durable

    def _report_departures(self, write: Write) -> None:
        """Hand ``write``'s departures to ``on_departures``, and the segments
        it stopped referencing to ``on_segments_dropped`` (it has landed:
        never before, or a segment could be deleted while a version that
        still references it is the latest)."""
        if self.on_departures is not None and write.departures:
            try:
                self.on_departures(write.departures)
            except Exception:  # a listener's bug must not break commits
                log.exception("on_departures listener failed")
        if self.on_segments_dropped is not None and write.dropped_segments:
            try:
                self.on_segments_dropped(write.dropped_segments)
            except Exception:
                log.exception("on_segments_dropped listener failed")

    def _load(self) -> QueueState:
        blob = self.store.get(self.key)
        self.stats.reads += 1
        # Raises DocumentError (I6), or DocumentMissing for a document that existed (I10).
        state = state_of(self.key, blob, policy=self.policy, presence=self.presence, seq=self.committed_seq)
        if self.on_departures is not None:
            state.departures = []
        if blob is None:  # a fresh store: the first write creates the document
            self._committed = None
            self.committed_seq = 0
            return state
        if self.on_load is not None:
            self.on_load(state)  # may raise to refuse this version (a fenced broker)
        self._committed = (blob.etag, [blob.data])
        self.committed_seq = state.seq
        return state

    def _load_retrying(self, tries: int | None = None) -> QueueState:
        """``_load``, tried again after each StoreUnavailable, up to ``tries``
        retries (``max_retries`` by default); the last failure is raised."""
        for attempt in range(self.max_retries if tries is None else tries):
            try:
                return self._load()
            except StoreUnavailable:
                self._backoff(attempt + 1)
        return self._load()


def verdict(write: Write) -> EngineError | None:
    """The outcome of ``write`` after an attempt failed (its error is the last
    of ``write.failures``), if it can be decided yet; None to wait for the
    other attempt, which may still land. Called under the committer's lock.

    * Every attempt answered: refused by all (PreconditionFailed), the write
      lost a race and did not land; otherwise the first other error, which
      says the outcome is unknown (a reply lost after one attempt landed is
      what makes the other's condition fail).
    * One refused while the other is still out: the document has moved past
      the version both were conditioned on, by the other attempt or by
      another writer, so the attempt still out has landed already or will
      be refused. Decided at once as unknown, settled by a re-read of the document
      (CommitWrites._recover) instead of waiting for a slow reply. (S3's 409
      for a conditional write racing another says nothing has moved; the
      re-read then finds the write not landed, and the write that follows
      is conditioned on the same version as the one still out: one of them
      lands, which the recovery's unsettled writes already handle.)
    * One failed otherwise while the other is out: wait for the other.
    """
    refused = [error for error in write.failures if isinstance(error, PreconditionFailed)]
    if write.answers < write.attempts:
        if refused:
            return StoreUnavailable(f"{refused[0]} while a second attempt at the same write was out: "
                                    "it may have landed, the document is read again to know")
        return None
    if len(refused) == len(write.failures):
        return write.failures[0]
    return next(error for error in write.failures if not isinstance(error, PreconditionFailed))
