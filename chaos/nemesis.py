"""The nemesis: a seeded schedule of faults, injected one after another.

Kinds (each recorded as a :class:`~chaos.history.Fault`):

* ``kill``     — ``kill -9`` a node (usually the leader), restart it after a moment;
* ``stop``     — SIGTERM a node (usually the leader), as a deploy does, half the time while
  half its writes' answers are lost: it must exit 0, and a leader must hand the lead over
  (queueadmin.shutdown), so that another node takes over sooner than a crashed leader
  could be replaced; restart it after a moment;
* ``pause``    — SIGSTOP a node (usually the leader) at a random moment, SIGCONT later;
* ``freeze``   — the leader stops itself (SIGSTOP, from its fault store) in the middle of
  a write; SIGCONT later;
* ``error``    — the leader's store requests fail for a while;
* ``lost``     — the leader's writes land but report failure for a while;
* ``slow``     — the leader's store requests are slow for a while;
* ``hang``     — one of the leader's writes hangs for seconds, then fails;
* ``delete``   — the document is deleted, and restored from the last version after a moment
  (as an operator would from a backup), only if nobody re-created it meanwhile;
* ``corrupt``  — the document is overwritten with garbage, and restored after a moment,
  only if nobody overwrote the garbage meanwhile;
* ``clock``    — a node's wall clock (usually the leader's) reads up to
  :data:`CLOCK_OFFSET_MAX_SECONDS` ahead or behind for a while, then steps
  back to the true time (its fault store's ``clock_offset_seconds``, which
  the node's broker reads through ``FaultStore.clock``): the stamps it
  writes (leases, due times, rate windows, schedule marks) meet other
  nodes' clocks, and its own after a step (docs/format.md, "Clocks");
* ``segment``  — format 2 only (``--segments``): the first segment the document references
  (the next one a refill reads) is deleted or overwritten with garbage, and restored after a
  moment, only if nobody wrote that key meanwhile. Only its queue may stop meanwhile; a node
  that writes the key is an I6 violation.

After each fault the nemesis heals it and waits until a push succeeds again
(at most :data:`RECOVERY_CAP_SECONDS`) before the next one, so that each
recovery time belongs to one fault.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence

import orjson

from chaos.cluster import TAKEOVER_SECONDS, Cluster, Node
from chaos.history import Fault, History
from engine import DOCUMENT_KEY

KINDS = ("kill", "stop", "pause", "freeze", "error", "lost", "slow", "hang", "delete", "corrupt", "clock")
#: Faults that need format 2; added to the default kinds when segments are on.
SEGMENT_KINDS = ("segment",)
ALL_KINDS = KINDS + SEGMENT_KINDS
WEIGHTS = {"kill": 3, "stop": 2, "pause": 4, "freeze": 3, "error": 3, "lost": 3, "slow": 2, "hang": 2, "delete": 1,
           "corrupt": 1, "clock": 2, "segment": 3}
#: How far a ``clock`` fault sets a node's clock off, either way. Below the
#: checks' recovery allowance (a schedule whose mark a clock ahead moved on
#: waits that long after the step back), above a lease (4 s in chaos runs).
CLOCK_OFFSET_MAX_SECONDS = 10.0
RECOVERY_CAP_SECONDS = 20.0
PROGRESS_EVERY = 25
#: A pause at least this long must see a takeover (a push served by another
#: node) before it ends: takeover delay, one client timeout, and slack.
LONG_PAUSE_SECONDS = TAKEOVER_SECONDS + 3.0 + 2.0


class Nemesis(threading.Thread):
    """Injects ``count`` faults (or until ``stop`` is set, or ``deadline`` passes),
    drawn by weight, or with ``each`` every kind in turn.

    (Method names avoid threading.Thread's own private ones: ``_target``, ``_delete``, ...)
    """

    def __init__(self, cluster: Cluster, history: History, *, seed: int, kinds: Sequence[str] = KINDS,
                 deadline: float, count: int | None = None, stop: threading.Event,
                 recovered: Callable[[float], float | None], each: bool = False,
                 progress: Callable[[str], None] | None = None) -> None:
        super().__init__(name="nemesis", daemon=True)
        unknown = set(kinds) - set(ALL_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(ALL_KINDS)}")
        self.cluster = cluster
        self.history = history
        self.rng = random.Random(seed)
        self.kinds = list(kinds)
        self.deadline = deadline
        self.count = count
        self.stop_event = stop
        self.recovered = recovered
        self.each = each  # every kind in turn (a shuffled round), instead of weighted draws
        self.progress = progress
        self.store = cluster.open_store()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            injected = 0
            while not self.stop_event.is_set() and time.monotonic() < self.deadline:
                if self.count is not None and injected >= self.count:
                    break
                if self.each:
                    if injected % len(self.kinds) == 0:
                        self.rng.shuffle(self.kinds)
                    kind = self.kinds[injected % len(self.kinds)]
                else:
                    kind = self.rng.choices(self.kinds, weights=[WEIGHTS[k] for k in self.kinds])[0]
                fault = getattr(self, f"fault_{kind}")()
                injected += 1
                self._await_recovery(fault)
                if self.progress is not None and injected % PROGRESS_EVERY == 0:
                    self.progress(f"chaos: {injected} faults injected")
                self.stop_event.wait(self.rng.uniform(0.1, 0.5))
        except BaseException as exc:  # reported by the runner; the run then fails
            self.error = exc
            self.history.event(f"harness: the nemesis crashed: {exc!r}")
        finally:
            self.store.close()

    # -- choosing a target ----------------------------------------------------

    def _pick_node(self, leader_share: float = 0.8) -> Node:
        alive = [n for n in self.cluster.nodes if n.alive and not n.paused]
        leader = self.cluster.leader()
        if leader is not None and self.rng.random() < leader_share:
            return leader
        return self.rng.choice(alive or self.cluster.nodes)

    def _begin(self, kind: str, node: Node | None, detail: str = "") -> Fault:
        return self.history.fault(Fault(kind=kind, node=None if node is None else node.url,
                                        start=time.monotonic(), detail=detail))

    def _end(self, fault: Fault) -> Fault:
        fault.end = time.monotonic()
        return fault

    def _await_recovery(self, fault: Fault) -> None:
        deadline = time.monotonic() + RECOVERY_CAP_SECONDS
        while not self.stop_event.is_set() and time.monotonic() < deadline:
            at = self.recovered(fault.start)
            if at is not None:
                fault.recovered_at = at
                return
            time.sleep(0.05)

    def _pause_seconds(self, long_share: float = 0.3) -> float:
        # Mostly short pauses; some long enough that a standby must take over
        # (always, when each kind runs once: then the one pause must show it).
        if self.each or self.rng.random() < long_share:
            return self.rng.uniform(LONG_PAUSE_SECONDS, LONG_PAUSE_SECONDS + 2)
        return self.rng.uniform(0.3, 3.0)

    # -- the faults -------------------------------------------------------------

    def fault_kill(self) -> Fault:
        node = self._pick_node()
        fault = self._begin("kill", node)
        node.kill()
        self.stop_event.wait(self.rng.uniform(0.2, 3.0))
        node.start()
        return self._end(fault)

    def fault_stop(self) -> Fault:
        node = self._pick_node()
        # A deploy stops a node that serves; one still starting (restarted by
        # the last fault) would die of the signal before daphne handles it.
        node.wait_ready()
        led = node is self.cluster.leader()
        # Half the stops lose the answers of half the node's writes meanwhile:
        # the hand-over's own write may land unanswered, and the re-read must
        # settle it (and what rode it) as landed.
        lost = self.rng.random() < 0.5
        fault = self._begin("stop", node, ("the leader" if led else "a standby") + (", answers lost" if lost else ""))
        fault.led = led
        if lost:
            node.set_faults(seed=self.rng.randrange(2**31), lost=0.5, ops=["put"])
        fault.exit_status = node.terminate()
        fault.exited_at = time.monotonic()
        node.set_faults()
        # Down for long enough that the hand-over shows: a standby polls every
        # heartbeat, far sooner than the takeover interval a crash costs.
        self.stop_event.wait(self.rng.uniform(0.5, 2.0 * TAKEOVER_SECONDS))
        node.start()
        return self._end(fault)

    def fault_pause(self) -> Fault:
        node = self._pick_node()
        seconds = self._pause_seconds()
        fault = self._begin("pause", node, f"{seconds:.1f}s")
        node.pause()
        self.stop_event.wait(seconds)
        node.resume()
        return self._end(fault)

    def fault_freeze(self) -> Fault:
        node = self._pick_node(leader_share=1.0)
        seconds = self._pause_seconds(long_share=0.6)
        fault = self._begin("freeze", node, f"{seconds:.1f}s in a write")
        node.set_faults(freeze=f"freeze-{time.monotonic_ns()}")
        until = time.monotonic() + 2.0
        while not node.stopped() and time.monotonic() < until:  # it stops itself at its next write
            time.sleep(0.01)
        node.paused = node.stopped()
        if not node.paused:
            fault.detail += " (the node wrote nothing: never froze)"
        self.stop_event.wait(seconds)
        node.set_faults()
        node.resume()
        return self._end(fault)

    def fault_clock(self) -> Fault:
        node = self._pick_node(leader_share=0.7)
        offset = round(self.rng.choice((-1.0, 1.0)) * self.rng.uniform(1.0, CLOCK_OFFSET_MAX_SECONDS), 1)
        seconds = self.rng.uniform(1.0, 4.0)
        fault = self._begin("clock", node, f"{offset:+g}s for {seconds:.1f}s, then back")
        fault.clock_offset = offset
        node.set_faults(clock_offset_seconds=offset)
        self.stop_event.wait(seconds)
        node.set_faults()
        return self._end(fault)

    def _store_window(self, kind: str, **plan: object) -> Fault:
        node = self._pick_node(leader_share=0.9)
        seconds = self.rng.uniform(0.5, 2.0)
        fault = self._begin(kind, node, f"{seconds:.1f}s {plan}")
        node.set_faults(seed=self.rng.randrange(2**31), **plan)
        self.stop_event.wait(seconds)
        node.set_faults()
        return self._end(fault)

    def fault_error(self) -> Fault:
        return self._store_window("error", error=round(self.rng.uniform(0.3, 1.0), 2))

    def fault_lost(self) -> Fault:
        return self._store_window("lost", lost=round(self.rng.uniform(0.3, 1.0), 2), ops=["put"])

    def fault_slow(self) -> Fault:
        return self._store_window("slow", slow=round(self.rng.uniform(0.3, 1.0), 2),
                                  slow_seconds=round(self.rng.uniform(0.1, 1.5), 2))

    def fault_hang(self) -> Fault:
        node = self._pick_node(leader_share=1.0)
        seconds = round(self.rng.uniform(1.5, 4.0), 1)
        fault = self._begin("hang", node, f"one write hangs {seconds:g}s")
        node.set_faults(hang=1.0, hang_seconds=seconds, ops=["put"])
        self.stop_event.wait(0.3)
        node.set_faults()
        self.stop_event.wait(seconds)
        return self._end(fault)

    def _with_nodes_stopped(self, change: Callable[[], None]) -> None:
        """Run ``change`` on the store while every node is stopped, so that the
        version we act on is the last one any node wrote before it.

        ``change`` goes through the store itself (an operator's ``aws s3 rm``,
        or a script on the folder store), which is conditional-write safe: a
        node stopped in the middle of a conditional write cannot land it on top
        of our change afterwards, on S3 nor on the folder store (whose versions
        are created, never replaced; see engine/stores/file.py).
        """
        running = [n for n in self.cluster.nodes if n.alive and not n.paused]
        for node in running:
            node.pause()
        try:
            time.sleep(0.05)
            change()
        finally:
            for node in running:
                node.resume()

    # Direct access to the document, around the nodes and their fault stores.

    def _raw_get(self) -> bytes | None:
        blob = self.store.get(DOCUMENT_KEY)
        return None if blob is None else blob.data

    def _raw_delete(self) -> None:
        self.store.delete(DOCUMENT_KEY)

    def _raw_put(self, data: bytes) -> None:
        self.store.put(DOCUMENT_KEY, data)

    def fault_delete(self) -> Fault:
        return self._break_document("delete", None, "I10: a node re-created the deleted document")

    def fault_corrupt(self) -> Fault:
        garbage = b'{"format": 1, "seq": "not a number' + self.rng.randbytes(16)
        return self._break_document("corrupt", garbage, "I6: a node overwrote an unreadable document")

    def fault_segment(self) -> Fault:
        fault = self._begin("segment", None)
        try:
            doc = orjson.loads(self._raw_get() or b"{}")
            # The first segment of a lane, or its first delayed segment (format 3).
            keys = [refs[0]["key"] for lane in (doc.get("lanes") or {}).values()
                    for refs in (lane["segments"], lane.get("delayed") or []) if refs]
            self.rng.shuffle(keys)
        except (ValueError, KeyError, TypeError, AttributeError):
            keys = []
        blob = self.store.get(keys[0]) if keys else None
        if blob is None:
            fault.detail = "no segment to damage"
            return self._end(fault)
        key = keys[0]
        garbage = None if self.rng.random() < 0.5 else blob.data[: len(blob.data) // 2] + self.rng.randbytes(8)
        if garbage is None:
            self.store.delete(key)
        else:
            self.store.put(key, garbage)
        fault.detail = f"{'deleted' if garbage is None else 'corrupted'} {key}"
        self.stop_event.wait(self.rng.uniform(0.5, 2.0))
        now = self.store.get(key)
        if (None if now is None else now.data) == garbage:
            self.store.put(key, blob.data)
            fault.detail += "; restored"
        elif now is None and key not in self._referenced_segments():
            # Its queue used it up meanwhile, from the leader's own copy of a
            # segment it sealed (checked when sealed), and a commit dropped
            # the reference: the leader deletes such a key after a grace.
            fault.detail += "; used up and deleted by the leader (no longer referenced)"
        else:
            fault.detail += "; NOT restored: a node wrote the key"
            self.history.event(f"I6: a node wrote the damaged segment {key}")
        return self._end(fault)

    def _referenced_segments(self) -> set[str]:
        """Keys the document in the store references now (empty if unreadable)."""
        try:
            doc = orjson.loads(self._raw_get() or b"{}")
            return {ref["key"] for lane in (doc.get("lanes") or {}).values()
                    for ref in (*lane["segments"], *lane.get("delayed", ()))}
        except (ValueError, KeyError, TypeError, AttributeError):
            return set()

    def _break_document(self, kind: str, garbage: bytes | None, violation: str) -> Fault:
        """Delete ``queue.json`` (``garbage`` None) or replace it with
        ``garbage``, with every node stopped; after a moment, put the saved
        version back, unless a node replaced what we left (``violation``)."""
        fault = self._begin(kind, None)
        saved: list[bytes] = []

        def damage() -> None:
            data = self._raw_get()
            if data is not None:
                saved.append(data)
                if garbage is None:
                    self._raw_delete()
                else:
                    self._raw_put(garbage)

        self._with_nodes_stopped(damage)
        self.stop_event.wait(self.rng.uniform(0.5, 2.0))

        def restore() -> None:
            if self._raw_get() == garbage:  # still gone (None), or still our garbage
                self._raw_put(saved[0])
                fault.detail = "restored from the version before"
            else:
                fault.detail = f"NOT restored: {violation.split(': ', 1)[1]}"
                self.history.event(violation)

        if saved:
            self._with_nodes_stopped(restore)
        return self._end(fault)
