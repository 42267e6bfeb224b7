"""Layers 3 and 4: the broker, and failover between brokers.

A :class:`Broker` is one node. Several nodes may point at one store; exactly
one leads. The leader runs the :class:`GroupCommitter` for every client and
commits at least every ``heartbeat_seconds`` even when idle (each commit also
expires due leases). A standby watches the document: when it has not changed
for ``takeover_seconds`` by the standby's own monotonic clock, the standby
takes over with one conditional write that names itself and raises the epoch
(and gives every running lease a fresh full timeout, since it cannot trust
another machine's clock).

Fencing (I3): the leader's committer checks every version it reads. When a
conditional write fails and the re-read document names another broker, the
committer fails everything in flight with :class:`NotLeader` (nothing from
the stale state is acknowledged) and the node becomes a standby.

A lost document (I10): a node that read the document, or finds its creation
marker, never re-creates it. The leader steps down, every node answers
:class:`DocumentMissing` and watches the store until an operator restores the
document or re-initialises the store; then the nodes elect a leader as usual.

Idle costs (I11): the control loop sleeps a heartbeat (leader) or a poll
interval (standby) between steps, however often the node stepped down or took
over, and its heartbeat commit waits at most ``takeover_seconds``: a commit
that does not answer by then means a standby may have taken over, so the node
steps down rather than wait forever. The leader writes every heartbeat, so a
standby reads each new version: it reads only the header (seq, writer, named
leader; :func:`~engine.parsing.parse_header`), and builds the whole state only
to take over, so its idle CPU does not grow with the queue.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal

from engine.brokercalls import BrokerCalls
from engine.cas import state_of, write_state
from engine.committer import DEFAULT_HEDGE_SECONDS, CommitStats, GroupCommitter
from engine.document import QueueState
from engine.errors import (
    CommitterStopped,
    CommitTimeout,
    DocumentError,
    DocumentMissing,
    EngineError,
    NotLeader,
    PreconditionFailed,
    StoreError,
    StoreUnsafe,
)
from engine.laneplans import REFILL_LEAD_SECONDS
from engine.lanes import LaneKeeper
from engine.leasewatch import LeaseWatches
from engine.lineage import Presence
from engine.model import BrokerInfo, Departure, new_process_id, utc_now
from engine.ops import FireSchedules, HandOver, TakeOver, Tick
from engine.parsing import DocumentHeader, parse_header
from engine.policy import DOCUMENT_KEY, Policy
from engine.readiness import Readiness, assess
from engine.schedules import Schedule, fire_op
from engine.storecheck import check_conditions
from engine.stores.base import ObjectStore
from engine.transitions import apply
from engine.waiters import WaitingClaims

log = logging.getLogger(__name__)
# The ETag a standby's watch starts from: it matches none, so the first read
# counts as a change (the watch then knows the document), but not as one seen
# happen (Broker.quiet).
_NOT_READ = object()

DEFAULT_HEARTBEAT_SECONDS = 2.0
DEFAULT_TAKEOVER_SECONDS = 10.0

Role = Literal["leader", "standby", "stopped"]


def new_broker_id() -> str:
    """A broker id unique per process start: host, pid and a nonce."""
    return new_process_id(nonce_bytes=3)


class Broker(BrokerCalls):
    """One broker node: leader or standby, switching as the document says.

    ``start()`` returns at once; a control thread elects and heartbeats.
    ``execute``/``aexecute`` run an operation on the leader's committer or
    raise NotLeader (with the leader's URL, when known). ``stop()`` is
    idempotent and lets in-flight operations finish.

    Before its first read of the document, the control thread checks that
    the store honours conditional writes (:mod:`engine.storecheck`; nine
    requests on a probe object) and never writes where it does not
    (``store_unsafe``); ``check_store=False`` skips that, for a store the
    caller has checked. ``hedge_seconds`` > 0 sends a write of the document
    again when it takes three times the last ones' median and at least
    that many seconds (a hedge, for a remote store's slow requests; see
    :mod:`engine.committer`).
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        url: str | None,
        key: str = DOCUMENT_KEY,
        broker_id: str | None = None,
        policy: Policy | None = None,
        heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS,
        takeover_seconds: float = DEFAULT_TAKEOVER_SECONDS,
        clock: Callable[[], datetime] = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
        on_commit: Callable[[QueueState], None] | None = None,
        on_departures: Callable[[list[Departure]], None] | None = None,
        schedules: Sequence[Schedule] = (),
        check_store: bool = True,
        hedge_seconds: float = DEFAULT_HEDGE_SECONDS,
    ) -> None:
        if not 0 < heartbeat_seconds < takeover_seconds:
            raise ValueError("need 0 < heartbeat_seconds < takeover_seconds")
        names = [item.name for item in schedules]
        if len(set(names)) != len(names):
            raise ValueError(f"schedule names must be unique, got {names}")
        self.store = store
        self.url = url
        self.key = key
        self.id = broker_id or new_broker_id()
        self.policy = policy or Policy()
        self.heartbeat_seconds = heartbeat_seconds
        #: Given to each committer: a write of the document slower than the last
        #: ones (and than this) is sent again (0: never; see engine.committer).
        self.hedge_seconds = hedge_seconds
        self.takeover_seconds = takeover_seconds
        self.clock = clock
        self.monotonic = monotonic
        self.on_commit = on_commit
        #: Given to each committer while this node leads: the jobs each landed
        #: commit removed (see :class:`~engine.model.Departure`). Runs on the
        #: writer thread: it must only hand them over, never block.
        self.on_departures = on_departures
        #: Recurring jobs this node fires while it leads (engine.schedules).
        self.schedules = list(schedules)
        # While leading: when this node began (a schedule without a mark fires
        # ticks from then on), and per schedule the latest tick a landed commit
        # of this leadership handled, so a heartbeat submits only new ticks.
        self._leading_since = clock()
        self._schedule_ticks: dict[str, datetime] = {}
        #: Long-poll claims waiting for work on this node (woken by its commits).
        self.waiters = WaitingClaims(clock=clock)
        #: Long-poll lease watches of workers on this node (answered by its commits).
        self.lease_watches = LeaseWatches()
        self.role: Role = "stopped"
        self.leader = BrokerInfo()  # as last seen in the document
        self.last_error: str | None = None  # why the last election step failed, for health pages
        self._unreadable: DocumentError | None = None  # I6: the document did not parse, last we read it
        # When (monotonic) this node last reached the store: a standby's ETag
        # check or read, a leader's landed heartbeat. For readiness probes.
        self._store_ok_at: float | None = None
        # Whether the store showed that it honours conditional writes (checked
        # once, before this node first reads the document: engine.storecheck),
        # and, if it showed it does not, why: then this node never writes.
        self._store_checked = not check_store
        self.store_unsafe: StoreUnsafe | None = None
        #: Takeovers this node won (each raised the epoch), for health pages and /metrics.
        self.takeovers = 0
        #: Commit counters for this node's lifetime, shared by every committer it runs.
        self.stats = CommitStats()
        self._seen_seq = 0
        # The seq this standby's watch saw the document change to, and when
        # (monotonic), set as one tuple (None: it has not seen one version
        # follow another): how long the leader has been quiet, on this node's
        # own clock (quiet).
        self._changed: tuple[int, float] | None = None
        self.presence = Presence(store, key, writer=self.id)  # I10, shared with each committer
        self._committer: GroupCommitter | None = None
        self._keeper: LaneKeeper | None = None  # format 2's background work, while leading
        # Clear while a takeover runs, from its decision until its committer
        # serves (or it gave up): a request in that window waits for the
        # outcome instead of a 503 "not the leader" from the very node the
        # document is about to name (a fresh node's first pushes, say).
        self._settled = threading.Event()
        self._settled.set()
        self._wake = threading.Event()
        self._stopping = False
        # While a stopping leader hands over: the leader its HandOver makes the
        # document name (nobody, at its epoch); None otherwise (see _check_named).
        self._handed_over: BrokerInfo | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> Broker:
        with self._lock:
            if self._thread is not None:
                return self
            self._stopping = False
            self._handed_over = None
            self.role = "standby"
            # Until its first step (the store check, then the first read and a
            # takeover it may decide) a request waits for the outcome, as in a
            # takeover, instead of a 503 that names no leader: a fresh node's
            # first pushes land (_run sets it after that step, whatever it found).
            self._settled.clear()
            self._thread = threading.Thread(target=self._run, name=f"broker:{self.id}", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float | None = None, *, hand_over: bool = True) -> None:
        """Stop the control thread and, on the leader, the committer (which
        first commits what was submitted). ``timeout`` bounds each wait, for
        a node whose store hangs.

        With ``hand_over`` (the default), a leader's last commit names no
        leader (:class:`~engine.ops.HandOver`, riding with what was
        submitted), so that a standby takes over at its next poll rather
        than after ``takeover_seconds`` without commits: a graceful stop,
        a deploy's SIGTERM, costs the cluster a poll, not a takeover
        interval. It is one conditional write like any other: a leader
        already replaced, or whose store fails it, hands nothing over (the
        standbys then take over as after a crash), and its committer then
        stops without draining: nothing of it is written after this returns
        but a write already in flight. Without it the stop
        looks like a crash to the others (for tests of takeovers)."""
        with self._lock:
            self._stopping = True
            thread, self._thread = self._thread, None
        self._wake.set()
        self._settled.set()  # nothing to wait for: requests are refused from here on
        if thread is not None:
            thread.join(timeout)
        committer, self._committer = self._committer, None
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.stop(timeout=0)  # it may be inside a commit of this committer: do not wait for it
        if committer is not None:
            if hand_over and self.role == "leader" and not self._hand_over(committer, timeout):
                # Not handed over (refused, failed, or slower than the bound):
                # what is still queued is refused (not_leader, never written,
                # I1) rather than retried on the writer thread after stop()
                # returned, which would land whatever of it the store takes
                # later, from a node that says it has stopped. A write in
                # flight still finishes and answers its callers.
                committer.stop(drain=False, timeout=timeout)
            else:
                committer.stop(timeout=timeout)
        self.role = "stopped"
        self.waiters.close(NotLeader(None))
        self.lease_watches.close(NotLeader(None))

    def _hand_over(self, committer: GroupCommitter, timeout: float | None) -> bool:
        """A stopping leader's last commit: name no leader (see :meth:`stop`).
        New requests are already refused (the committer is detached); what
        was submitted before rides this write or an earlier one. An operation
        submitted in the same instant may ride a write after it: that write
        is conditional like every other, so it lands only while no standby
        has taken over, and is refused (not_leader) otherwise: never
        acknowledged unwritten (I1). Waits at most ``takeover_seconds`` (or
        ``timeout``, if shorter): by then a standby takes over anyway. True
        once the hand-over landed."""
        epoch = self.leader.epoch
        wait = self.takeover_seconds if timeout is None else min(timeout, self.takeover_seconds)
        self._handed_over = BrokerInfo(epoch=epoch)  # what the document names once it lands (see _check_named)
        try:
            committer.execute(HandOver(broker_id=self.id, epoch=epoch), timeout=wait)
        except EngineError as exc:  # refused (replaced), timed out, or the store failed it
            log.warning("broker %s stopped without handing over %s (a standby takes over after %s s): %s",
                        self.id, self.key, self.takeover_seconds, exc)
            return False
        self.leader = BrokerInfo(epoch=epoch)
        log.info("broker %s handed over %s (epoch %d): a standby takes over at its next poll", self.id, self.key, epoch)
        return True

    @property
    def committer(self) -> GroupCommitter | None:
        """The running committer while this node leads, else None."""
        return self._committer if self.role == "leader" else None

    @property
    def seq(self) -> int:
        """The seq of the latest version this node committed or saw. No I/O."""
        committer = self._committer
        if self.role == "leader" and committer is not None:
            return committer.committed_seq
        return self._seen_seq

    def quiet(self) -> tuple[int, float] | None:
        """On a standby: the seq its watch last saw the document change to,
        and the seconds since, on this node's monotonic clock (at most a poll
        later than the commit), as a takeover counts them: the leader's quiet
        time, without comparing the two nodes' wall clocks. None on the
        leader, and until the watch has seen one version follow another.
        No I/O."""
        changed = self._changed
        if self.role == "leader" or changed is None:
            return None
        seq, at = changed
        return seq, max(self.monotonic() - at, 0.0)

    @property
    def leader_url(self) -> str | None:
        return self.url if self.role == "leader" else self.leader.url

    @property
    def document_problem(self) -> DocumentError | None:
        """Why the document cannot be used right now, for health pages: it is
        lost (DocumentMissing, I10) or it did not parse when last read (I6).
        None while it is fine. No I/O."""
        return self.presence.missing or self._unreadable

    @property
    def document_missing(self) -> DocumentMissing | None:
        """Set while the document is known to be lost (I10): every operation
        is refused with it until an operator restores the document. No I/O."""
        return self.presence.missing

    def readiness(self) -> Readiness:
        """Whether this node should take traffic now (see
        :mod:`engine.readiness`). No I/O: it reports what the control loop
        last saw, which is at most a poll interval or a heartbeat old."""
        return assess(
            role=self.role,
            store_ok_at=self._store_ok_at,
            now=self.monotonic(),
            takeover_seconds=self.takeover_seconds,
            missing=self.presence.missing,
            unreadable=self._unreadable,
            last_error=self.last_error,
            unsafe=self.store_unsafe,
        )

    # -- election --------------------------------------------------------------

    def _run(self) -> None:
        last_etag: object = _NOT_READ  # matches no ETag, so the first read counts as a change
        changed_at = self.monotonic()
        while True:
            # Cleared before each step (and before checking for a stop), never
            # after the wait: a step-down or stop that sets it meanwhile cuts
            # the next wait short once, and a set event is never left to turn
            # every later wait into a busy loop (I11).
            self._wake.clear()
            if self._stopping:
                break
            try:
                if self.role == "leader":
                    self._heartbeat()
                    self._wake.wait(self._leader_wait())
                    continue
                if self._store_checked or self._check_store():
                    last_etag, changed_at = self._watch(last_etag, changed_at)
            except Exception:  # a bug: log it and keep the node alive (I8)
                log.exception("broker %s: control step failed unexpectedly", self.id)
                self.last_error = "the control loop failed unexpectedly; see the log"
            self._settled.set()  # the first step is over (see start); a takeover's own wait ended within it
            # Just took over: the first heartbeat comes sooner if a schedule's tick does.
            self._wake.wait(min(self.poll_seconds, self._leader_wait()) if self.role == "leader" else self.poll_seconds)

    def _check_store(self) -> bool:
        """Check that the store honours conditional writes (on a probe object
        of its own, engine.storecheck) and say whether it does. A transient
        failure is tried again at the next poll; a store that broke a rule is
        never written by this node (``store_unsafe``, readiness and the log
        say why): two writers' versions would overwrite each other there."""
        if self.store_unsafe is not None:
            return False
        try:
            check_conditions(self.store, self.key)
        except StoreUnsafe as exc:
            self.store_unsafe = exc
            self.last_error = str(exc)
            log.error("broker %s: %s", self.id, exc)
            return False
        except StoreError as exc:
            self.last_error = f"checking that the store honours conditional writes: {exc}"
            log.warning("broker %s: %s", self.id, self.last_error)
            return False
        self._store_checked = True
        return True

    @property
    def poll_seconds(self) -> float:
        """How often a standby checks the document's ETag."""
        return min(self.heartbeat_seconds, self.takeover_seconds / 4)

    def _watch(self, last_etag: object, changed_at: float) -> tuple[object, float]:
        """One standby step: check the ETag; read, parse and maybe take over
        when it changed, or when nobody wrote for ``takeover_seconds``.
        Returns the new ``(last_etag, changed_at)``."""
        try:
            # A metadata-only request while nothing changes; the document
            # itself is read only when its ETag moved.
            etag = self.store.etag(self.key)
            self._store_ok_at = self.monotonic()
            if etag != last_etag:
                blob = self.store.get(self.key)
                # The first read of a watch is not a change it saw happen.
                seen_change = self._changed is not None or last_etag is not _NOT_READ
                last_etag, changed_at = (blob.etag if blob is not None else None), self.monotonic()
                # The leader writes every heartbeat, so this runs every poll:
                # read only the header, whose cost does not grow with the
                # queue (I11); the whole state is built only to take over.
                header = self._parse_header(blob)
                self.leader = header.broker
                self._seen_seq = header.seq
                if seen_change:
                    self._changed = (header.seq, changed_at)
                self.last_error = None
                self._unreadable = None
                if self._should_take_over_now(header.broker):
                    self._take_over(self._parse(blob))
            elif self.presence.missing is None and self.monotonic() - changed_at >= self.takeover_seconds:
                # Nobody wrote for a whole takeover interval: the leader
                # is gone (or paused). Our own clock decides; never theirs.
                # (While the document is lost there is nothing to take over.)
                self._take_over(self._parse(self.store.get(self.key)))
                changed_at = self.monotonic()
        except DocumentMissing as exc:
            self.last_error = str(exc)  # logged once by Presence; I10: wait for an operator
        except DocumentError as exc:
            self.last_error = str(exc)
            self._unreadable = exc
            log.error("%s", exc)  # I6: wait for an operator; never overwrite
        except StoreError as exc:
            self.last_error = str(exc)
            log.warning("broker %s: store error while watching %s: %s", self.id, self.key, exc)
        return last_etag, changed_at

    def _parse(self, blob: Any) -> QueueState:
        """The state of ``blob``. A missing document is an empty state only on
        a fresh store; one that existed raises DocumentMissing (I10)."""
        return state_of(self.key, blob, policy=self.policy, presence=self.presence, seq=self._seen_seq,
                        epoch=self.leader.epoch)

    def _parse_header(self, blob: Any) -> DocumentHeader:
        """Like :meth:`_parse`, without building the jobs (see parse_header)."""
        if blob is None:
            state = self._parse(blob)  # an empty state, or DocumentMissing (I10)
            return DocumentHeader(seq=state.seq, writer=state.writer, broker=state.broker)
        header = parse_header(self.key, blob.data)
        self.presence.found(seq=header.seq, epoch=header.broker.epoch)
        return header

    def _should_take_over_now(self, named: BrokerInfo) -> bool:
        """Take over at once if nobody leads, or if the named leader is this
        node's own earlier life (same advertised URL, restarted)."""
        return named.id is None or named.id == self.id or (self.url is not None and named.url == self.url)

    def _take_over(self, state: QueueState) -> None:
        """One conditional write naming this broker, then start committing.
        Requests that arrive meanwhile wait for the outcome (see _settled)."""
        self._settled.clear()
        try:
            self._take_over_now(state)
        finally:
            self._settled.set()

    def _take_over_now(self, state: QueueState) -> None:
        # A schedule without a mark fires the ticks from here on (its
        # ticks while the takeover is written and read back included).
        began = self.clock()
        if state.broker.id != self.id:
            apply(state, TakeOver(broker_id=self.id, url=self.url, epoch=state.broker.epoch), self.clock())
            writer = self.id
            seq = state.seq + 1
            parts = state.encode(seq=seq, writer=writer, now=self.clock())
            try:
                write_state(self.store, self.key, parts, etag=state.etag)
            except PreconditionFailed:
                return  # someone wrote first: watch again
            # StoreUnavailable propagates: the next poll reads whether it landed.
            if state.etag is None:
                self.presence.found(seq=seq)  # we created it: write the creation marker (I10)
            self.takeovers += 1
            log.info("broker %s took over %s (epoch %d)", self.id, self.key, state.broker.epoch)
        # Each committer writes under its own writer id, never the bare broker
        # id: after a step-down this node may lead again (the document still
        # names it) while the old committer's write is still in flight. Both
        # then number their commits from the same seq, and a shared id would
        # let one settle its failed write on the other's landed one ("the
        # document records our (writer, seq)") and acknowledge operations that
        # were never written (I1, I2).
        committer = GroupCommitter(
            self.store,
            key=self.key,
            policy=self.policy,
            clock=self.clock,
            writer_id=f"{self.id}/{secrets.token_hex(4)}",
            on_load=self._check_named,
            on_commit=self._committed,
            on_write=self._writing,
            on_departures=self.on_departures,
            on_segments_dropped=self._segments_dropped,
            on_segments_doubtful=self._segments_doubtful,
            presence=self.presence,
            stats=self.stats,
            hedge_seconds=self.hedge_seconds,
        )
        try:
            committer.start()
        except NotLeader:
            return
        self.leader = BrokerInfo(id=self.id, url=self.url, epoch=committer.state.broker.epoch if committer.state else 0)
        self._leading_since = began
        self._schedule_ticks = {}
        self._keeper = LaneKeeper(
            self.store, key=self.key, policy=self.policy,
            execute=lambda op: committer.execute(op, timeout=self.takeover_seconds),
            submit=committer.submit,
            epoch=self.leader.epoch, clock=self.clock,
            grace_seconds=2 * self.heartbeat_seconds,
            collect_seconds=max(self.takeover_seconds, 10 * self.heartbeat_seconds),
            retry_seconds=self.heartbeat_seconds,
            # A delayed segment comes back this long before it is due: the
            # refill's own lead, plus a heartbeat, since an idle leader plans
            # from the version it lands once a heartbeat.
            delayed_lead_seconds=REFILL_LEAD_SECONDS + self.heartbeat_seconds,
        ).start()
        self._committer = committer
        self._store_ok_at = self.monotonic()  # the takeover wrote, the committer read
        self.role = "leader"

    def _committed(self, state: QueueState) -> None:
        """The committer's on_commit (its writer thread): wake long-poll
        claims for what became claimable, then tell ``on_commit``."""
        try:
            self.waiters.committed(state)
        except Exception:  # a bug there must neither break commits nor starve on_commit
            log.exception("broker %s: waking long-poll claims failed", self.id)
        try:
            self.lease_watches.committed(state)
        except Exception:  # as above
            log.exception("broker %s: answering lease watches failed", self.id)
        self._plan_segments(state, landed=True)
        if self.on_commit is not None:
            self.on_commit(state)

    def _writing(self, state: QueueState) -> None:
        """The committer's on_write (its writer thread): the lane keeper plans
        seals from a version being written (see ``LaneKeeper.writing``)."""
        self._plan_segments(state, landed=False)

    def _plan_segments(self, state: QueueState, *, landed: bool) -> None:
        """Let the lane keeper, if leading, plan from ``state``; a bug there
        is logged and must not break commits."""
        keeper = self._keeper
        if keeper is None:
            return
        try:
            if landed:
                keeper.committed(state)
            else:
                keeper.writing(state)
        except Exception:
            log.exception("broker %s: planning segment work failed", self.id)

    def _segments_dropped(self, keys: list[str]) -> None:
        """The committer's on_segments_dropped (its writer thread)."""
        keeper = self._keeper
        if keeper is not None:
            keeper.reaper.dropped(keys)

    def _segments_doubtful(self, keys: list[str]) -> None:
        """The committer's on_segments_doubtful (its writer thread)."""
        keeper = self._keeper
        if keeper is not None:
            keeper.reaper.doubtful(*keys)

    @property
    def segment_problems(self) -> dict[str, str]:
        """Per queue, why its next segment, or next delayed segment, cannot be
        read (empty: none), while leading."""
        keeper = self._keeper
        # A queue's pending lane outranks its delayed one: one message a queue.
        return {**keeper.delayed_problems, **keeper.problems} if keeper is not None else {}

    def _check_named(self, state: QueueState) -> None:
        """Runs on every read of the leader's committer: fence if replaced.
        A document that names nobody at the epoch this node is handing over
        is its own hand-over, landed (a re-read after its answer was lost):
        not a successor, so what rode that write is settled as landed."""
        if state.broker.id != self.id and state.broker != self._handed_over:
            self.leader = state.broker
            self._step_down(f"replaced by broker {state.broker.id} (epoch {state.broker.epoch})")
            raise NotLeader(state.broker.url)

    def _step_down(self, why: str, error: EngineError | None = None) -> None:
        """Stop leading: fail what the committer has not written with ``error``
        (NotLeader by default) and watch the document as a standby."""
        if self.role != "leader":
            return
        log.warning("broker %s steps down: %s", self.id, why)
        self.role = "standby"
        self.last_error = why
        self.waiters.close(error or NotLeader(self.leader.url))
        self.lease_watches.close(error or NotLeader(self.leader.url))
        committer, self._committer = self._committer, None
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.stop(timeout=0)  # it may be inside a commit of this committer: do not wait for it
        if committer is not None:
            # Bounded: a writer stuck in a store call must not hold the
            # control loop (the committer fails its queue itself).
            committer.stop(drain=False, error=error or NotLeader(self.leader.url), timeout=self.heartbeat_seconds)
        self._wake.set()

    def _due_schedules(self) -> tuple[FireSchedules | None, dict[str, datetime]]:
        """The schedule ticks to fire with this heartbeat (engine.schedules);
        a bug there is logged and must not stop the heartbeat."""
        if not self.schedules:
            return None, {}
        try:
            return fire_op(self.schedules, self._schedule_ticks, now=self.clock(), since=self._leading_since)
        except Exception:
            log.exception("broker %s: finding the due schedule ticks failed", self.id)
            return None, {}

    def _schedules_handled(self, ticks: dict[str, datetime], outcomes: Any) -> None:
        """Remember what a landed FireSchedules handled, and log it."""
        if isinstance(outcomes, BaseException):
            log.warning("broker %s: firing schedules failed: %s", self.id, outcomes)
            return
        self._schedule_ticks.update(ticks)
        for (name, tick), outcome in zip(ticks.items(), outcomes, strict=True):
            if outcome == "missed":
                log.warning("schedule %s: the tick of %s is too late to fire (catch_up_seconds)", name,
                            tick.isoformat())
            elif outcome is not None:  # a schedule every second must not flood the log
                # A paused schedule's skipped ticks are the operator's choice, said once by its audit entry.
                log.log(logging.INFO if outcome == "registered" else logging.DEBUG, "schedule %s: tick of %s %s",
                        name, tick.isoformat(), outcome)

    def _leader_wait(self) -> float:
        """How long the leader sleeps before its next heartbeat: a heartbeat,
        or less when a schedule's next tick comes sooner (it fires on time)."""
        wait = self.heartbeat_seconds
        if self.schedules:
            now = self.clock()
            try:
                due = [t for t in (item.next_due(now) for item in self.schedules) if t is not None]
            except Exception:
                log.exception("broker %s: finding the next schedule tick failed", self.id)
                due = []
            if due:
                # A hair after the tick, so that the clock has passed it.
                wait = min(wait, max((min(due) - now).total_seconds() + 0.005, 0.005))
        return wait

    def _heartbeat(self) -> None:
        committer = self._committer
        if committer is None:
            self.role = "standby"
            return
        try:
            fire, ticks = self._due_schedules()
            # Never wait forever (I8): by takeover_seconds without a landed
            # write a standby may have taken over, so stop acknowledging.
            # Due schedule ticks ride the heartbeat's own commit.
            results = committer.execute_many([fire, Tick()] if fire else [Tick()], timeout=self.takeover_seconds)
            if isinstance(results[-1], BaseException):
                raise results[-1]
            if fire is not None:
                self._schedules_handled(ticks, results[0])
            self._unreadable = None
            self._store_ok_at = self.monotonic()
        except (NotLeader, CommitterStopped):
            self._step_down("a heartbeat commit was refused")
        except CommitTimeout:
            self._step_down(f"a heartbeat commit did not answer within {self.takeover_seconds} s")
        except DocumentMissing as exc:  # I10: nothing to lead; wait for an operator
            self._step_down(str(exc), error=exc)
            self.last_error = str(exc)
        except EngineError as exc:  # store trouble: keep leading, retry next beat
            self.last_error = str(exc)
            if isinstance(exc, DocumentError):
                self._unreadable = exc
            log.warning("broker %s: heartbeat commit failed: %s", self.id, exc)
