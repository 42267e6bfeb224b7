"""``python -m bench requests``: how many requests the store gets, by kind,
which is what a cloud bills (S3 and GCS bill writes and listings at one rate,
reads and metadata requests at a lower one; Azure alike).

Two measurements, on an in-process store that counts every call (a
:class:`~engine.MemoryStore` behind ``--latency-ms`` of added latency, so
that batching behaves as against a remote store), with the engine's default
heartbeat (2 s) and takeover interval (10 s) unless told otherwise:

* **idle**: one leader and ``--standbys`` standby brokers on one store, no
  jobs, for ``--seconds``; the counts are scaled to an hour;
* **1,000 jobs**: a producer pushes ``--jobs`` jobs in batches of
  ``--push-batch`` through the leader, and one :class:`engine.Worker`
  (``--concurrency`` slots, batching) drains them with a no-op handler; the
  idle requests of the same span are subtracted, and the counts scaled to
  1,000 jobs. A second line does the same one job per push and one slot,
  the least batching there is.

Prints a Markdown table. Counts are per store call: ``put`` (a conditional
write, billed as a write), ``get`` (a read of the whole object), ``etag``
(a metadata request: HEAD on S3, a metadata GET on GCS, Get Blob Properties on
Azure), ``list`` and ``delete``.
"""

from __future__ import annotations

import argparse
import shlex
import threading
import time
from collections import Counter
from collections.abc import Sequence

from bench.children import wait_until
from engine import Blob, Broker, LatencyStore, MemoryStore, ObjectStore, Worker, WorkerOptions
from engine.ops import push_op

KINDS = ("put", "get", "etag", "list", "delete")


class CountingStore(ObjectStore):
    """Counts each call by kind, then passes it on."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _count(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)

    def get(self, key: str) -> Blob | None:
        self._count("get")
        return self.inner.get(key)

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        self._count("get_range")
        return self.inner.get_range(key, start, length)

    def etag(self, key: str) -> str | None:
        self._count("etag")
        return self.inner.etag(key)

    def put(self, key: str, data: bytes, *, if_match: str | None = None, if_none_match: bool = False) -> str:
        self._count("put")
        return self.inner.put(key, data, if_match=if_match, if_none_match=if_none_match)

    def put_parts(
        self, key: str, parts: Sequence[bytes], *, if_match: str | None = None, if_none_match: bool = False
    ) -> str:
        self._count("put")
        return self.inner.put_parts(key, parts, if_match=if_match, if_none_match=if_none_match)

    def delete(self, key: str) -> None:
        self._count("delete")
        self.inner.delete(key)

    def list(self, prefix: str = "") -> list[str]:
        self._count("list")
        return self.inner.list(prefix)

    def describe(self) -> str:
        return f"counting({self.inner.describe()})"


def _row(name: str, counts: Counter[str], scale: float) -> str:
    cells = " | ".join(f"{counts[kind] * scale:,.0f}" for kind in KINDS)
    return f"| {name} | {cells} | {sum(counts.values()) * scale:,.0f} |"


def _drain(broker: Broker, jobs: int, *, push_batch: int, concurrency: int) -> float:
    """Push ``jobs`` jobs in batches, drain them with one worker; the seconds it took."""
    committer = broker.committer
    assert committer is not None
    started = time.monotonic()
    payload = {"type": "send_email", "to": "user@example.com", "template": "weekly-report"}
    for start in range(0, jobs, push_batch):
        committer.execute(push_op("bench", [payload] * min(push_batch, jobs - start), policy=broker.policy))
    options = WorkerOptions(concurrency=concurrency, burst=True, poll_seconds=0.01)
    Worker(committer, queues=["bench"], handler=lambda _: None, options=options).run()
    return time.monotonic() - started


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench requests", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="idle measurement (60)")
    parser.add_argument("--standbys", type=int, default=1, help="standby brokers beside the leader (1)")
    parser.add_argument("--jobs", type=int, default=1000, help="jobs pushed and drained (1000)")
    parser.add_argument("--push-batch", type=int, default=100, help="jobs per push request (100)")
    parser.add_argument("--concurrency", type=int, default=32, help="the worker's slots (32)")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="added to every store call (50)")
    parser.add_argument("--heartbeat", type=float, default=2.0, help="seconds (2, the default)")
    parser.add_argument("--takeover", type=float, default=10.0, help="seconds (10, the default)")
    args = parser.parse_args(argv)

    store = CountingStore(LatencyStore(MemoryStore(), latency=args.latency_ms / 1000, bandwidth=None))
    brokers = [Broker(store, url=f"http://node-{n}", heartbeat_seconds=args.heartbeat,
                      takeover_seconds=args.takeover) for n in range(1 + args.standbys)]
    brokers[0].start()
    wait_until(lambda: brokers[0].role == "leader", 30, "the first broker to lead")
    for standby in brokers[1:]:
        standby.start()
    time.sleep(2 * args.heartbeat)  # past start-up: every node in its steady state
    try:
        before = store.snapshot()
        time.sleep(args.seconds)
        idle = store.snapshot() - before
        per_second = {kind: idle[kind] / args.seconds for kind in KINDS}

        runs = []
        for name, push_batch, concurrency in (
            (f"{args.jobs:,} jobs: pushes of {args.push_batch}, one worker with {args.concurrency} slots",
             args.push_batch, args.concurrency),
            (f"{args.jobs:,} jobs: one job per push, one worker with 1 slot", 1, 1),
        ):
            before = store.snapshot()
            took = _drain(brokers[0], args.jobs, push_batch=push_batch, concurrency=concurrency)
            used = store.snapshot() - before
            busy = Counter({kind: max(0, round(used[kind] - per_second[kind] * took)) for kind in KINDS})
            runs.append((name, busy, took))
    finally:
        for broker in reversed(brokers):
            broker.stop()

    print(f"command: `{shlex.join(['python', '-m', 'bench', 'requests', *argv])}`")
    standbys = f"{args.standbys} standby" + ("s" if args.standbys != 1 else "")
    print(f"conditions: one leader and {standbys} on one store, heartbeat {args.heartbeat:g} s, "
          f"takeover after {args.takeover:g} s, {args.latency_ms:g} ms per store call; idle measured for "
          f"{args.seconds:g} s; job runs minus the idle requests of their span")
    print()
    print("| what | put | get | etag | list | delete | all |")
    print("|---|--:|--:|--:|--:|--:|--:|")
    nodes = 1 + args.standbys
    print(_row(f"idle, per hour ({nodes} node{'s' if nodes != 1 else ''})", idle, 3600 / args.seconds))
    for name, busy, took in runs:
        print(_row(f"{name}, per 1,000 jobs ({took:.1f} s)", busy, 1000 / args.jobs))
    return 0
