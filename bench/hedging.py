"""``python -m bench hedge``: what hedged writes do for a store with a slow tail.

A :class:`engine.GroupCommitter` writes to a memory store behind the latency
model of ``python -m bench backlog`` (``--latency-ms`` a request, plus its
bytes at ``--bandwidth`` MB/s), where one write of the document in
``--tail-chance`` is held ``--tail-seconds`` before it reaches the store, as
a stalled connection or a slow storage node holds a real request: it lands
late, or is refused once the document has moved on. ``--submitters``
closed-loop coroutines push one job each, for ``--duration`` seconds after
``--warmup``, twice in one run: with hedging off, then with
``--hedge-seconds`` (the app's default on S3, GCS and Azure,
``QUEUE_STORE_HEDGE_SECONDS``). Every held write holds all the callers of
the writes behind it; a hedge sends the same conditional PUT again once the
write has taken three times the last ones' median and the hedge seconds.

Prints each side's pushes a second, p50, p99, p99.9 and the slowest push,
the writes, how many of them the tail held, the hedges sent and those that
landed, and the store's puts per landed write (what hedging costs in
requests). Each push's job is checked in the document at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shlex
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from bench.backlog_run import push_phase
from bench.facts import machine_facts
from engine import DOCUMENT_KEY, Broker, Policy
from engine.stores import LatencyStore, MemoryStore, ObjectStore, WrappedStore

# As python -m bench backlog: the pushed jobs beyond a queue's front are sealed
# into segment objects, so the document, and each write, stays the same size.
POLICY = Policy(segment_jobs=1024, head_jobs=1000, refill_below=500)
DEFAULTS = {"latency_ms": 50.0, "bandwidth": 100.0, "tail_chance": 0.02, "tail_seconds": 1.0,
            "submitters": 256, "duration": 20.0, "warmup": 5.0, "hedge_seconds": 0.25, "seed": 1}


class TailStore(WrappedStore):
    """``inner``, where a put of the document is held ``seconds``, with
    probability ``chance`` (seeded): ``before`` it is sent (it lands late),
    or ``after`` it landed (its reply is late). Counts puts and holds."""

    def __init__(self, inner: ObjectStore, *, chance: float, seconds: float, seed: int, where: str = "before") -> None:
        super().__init__(inner)
        self.where = where
        self.chance = chance
        self.seconds = seconds
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.puts = 0
        self.held = 0

    def put_parts(
        self, key: str, parts: Sequence[bytes], *, if_match: str | None = None, if_none_match: bool = False
    ) -> str:
        hold = False
        if key == DOCUMENT_KEY:
            with self._lock:
                self.puts += 1
                hold = self._random.random() < self.chance
        if hold and self.where == "before":
            self._count_hold()
            time.sleep(self.seconds)
        etag = self.inner.put_parts(key, parts, if_match=if_match, if_none_match=if_none_match)
        if hold and self.where == "after":  # only a write that landed has a reply to hold
            self._count_hold()
            time.sleep(self.seconds)
        return etag

    def _count_hold(self) -> None:
        with self._lock:
            self.held += 1


def run_side(args: argparse.Namespace, hedge_seconds: float) -> dict[str, Any]:
    """One side: a fresh store and committer, the pushes, and what they did."""
    store = TailStore(LatencyStore(MemoryStore(), latency=args.latency_ms / 1000, bandwidth=args.bandwidth * 1e6),
                      chance=args.tail_chance, seconds=args.tail_seconds, seed=args.seed, where=args.tail_where)
    broker = Broker(store, url=None, policy=POLICY, heartbeat_seconds=1.0, takeover_seconds=60.0,
                    hedge_seconds=hedge_seconds, check_store=False).start()
    acknowledged: list[str] = []
    try:
        while broker.committer is None:
            time.sleep(0.01)
        push = asyncio.run(push_phase(broker, ["q"], vars(args), acknowledged=acknowledged))
        document = broker.committer.document()
        sample = random.Random(args.seed).sample(acknowledged, min(200, len(acknowledged)))
        unfound = sum(broker.get_job(job_id)["status"] != "pending" for job_id in sample)
    finally:
        broker.stop()
    # Every job pushed is pending: in the document or in a segment, counted once each.
    in_document = sum(job["queue"] == "q" for job in document["jobs"])
    in_segments = sum(ref["total"] - ref["consumed"] for ref in document.get("lanes", {}).get("q", {})
                      .get("segments", []))
    pushed = document["queues"]["q"]["pushed"]
    stats = broker.stats
    return {
        "hedge_seconds": hedge_seconds, "pushes": push["ops"], "per_s": push["ops_per_s"], "errors": push["errors"],
        "p50_ms": push["p50_ms"], "p99_ms": push["p99_ms"], "p999_ms": push["p999_ms"], "max_ms": push["max_ms"],
        "writes": stats.commits, "held": store.held, "hedged": stats.hedged, "hedges_landed": stats.hedges_landed,
        "puts": store.puts, "lost_races": stats.lost_races, "ambiguous": stats.ambiguous,
        "acknowledged": len(acknowledged), "pushed": pushed, "pending": in_document + in_segments,
        "unfound": unfound, "duplicates": len(acknowledged) - len(set(acknowledged)),
    }


def table(sides: list[dict[str, Any]]) -> str:
    rows = ["| hedging | pushes/s | p50 ms | p99 ms | p99.9 ms | slowest ms | writes | held by the tail | hedged "
            "| landed by the hedge | settled by a re-read | puts a write | acknowledged / pushed / pending |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    for side in sides:
        name = f"after {side['hedge_seconds']:g} s" if side["hedge_seconds"] else "off"
        rows.append(
            f"| {name} | {side['per_s']:,.0f} | {side['p50_ms']:.0f} | {side['p99_ms']:.0f} | {side['p999_ms']:.0f} "
            f"| {side['max_ms']:.0f} | {side['writes']:,} | {side['held']} | {side['hedged']} "
            f"| {side['hedges_landed']} | {side['ambiguous']} | {side['puts'] / max(side['writes'], 1):.3f} "
            f"| {side['acknowledged']:,} / {side['pushed']:,} / {side['pending']:,} |")
    return "\n".join(rows)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench hedge", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency-ms", type=float, default=DEFAULTS["latency_ms"], help="ms a request (50)")
    parser.add_argument("--bandwidth", type=float, default=DEFAULTS["bandwidth"], help="MB/s of its bytes (100)")
    parser.add_argument("--tail-chance", type=float, default=DEFAULTS["tail_chance"],
                        help="the chance a write of the document is held (0.02)")
    parser.add_argument("--tail-seconds", type=float, default=DEFAULTS["tail_seconds"],
                        help="how long a held write waits before it is sent (1)")
    parser.add_argument("--tail-where", choices=("before", "after"), default="before",
                        help="hold a write before it reaches the store (it lands late), or after it landed "
                             "(its reply is late) (before)")
    parser.add_argument("--submitters", type=int, default=DEFAULTS["submitters"], help="closed-loop pushers (256)")
    parser.add_argument("--duration", type=float, default=DEFAULTS["duration"], help="measured seconds a side (20)")
    parser.add_argument("--warmup", type=float, default=DEFAULTS["warmup"], help="seconds before the window (5)")
    parser.add_argument("--hedge-seconds", type=float, default=DEFAULTS["hedge_seconds"],
                        help="the hedged side's QUEUE_STORE_HEDGE_SECONDS (0.25)")
    parser.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="seeds the tail's dice (1)")
    args = parser.parse_args(argv)
    if not (0 <= args.tail_chance <= 1 and args.tail_seconds >= 0 and args.latency_ms >= 0 and args.bandwidth >= 0
            and args.submitters >= 1 and args.duration > 0 and args.warmup >= 0 and args.hedge_seconds > 0):
        parser.error("need 0 <= --tail-chance <= 1, --hedge-seconds and --duration > 0, and no negative value")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    facts = machine_facts()
    print(f"command: `{shlex.join(['python', '-m', 'bench', 'hedge', *argv])}`")
    print(f"machine: nproc={facts['nproc']}, {facts['cpu']}, {facts['memory_gib']} GiB RAM, {facts['os']}; "
          f"load average {os.getloadavg()[0]:.2f} at the start")
    print(f"python: {facts['python']}; orjson {facts['orjson']}; code at git {facts['git']}")
    print(f"conditions: memory store + {args.latency_ms:g} ms a request and {args.bandwidth:g} MB/s for its bytes; "
          f"{args.tail_chance:.1%} of the document's writes held {args.tail_seconds:g} s "
          f"{'before they are sent' if args.tail_where == 'before' else 'after they landed'} "
          f"(seed {args.seed}); {args.submitters} closed-loop submitters pushing one job each; warm-up "
          f"{args.warmup:g} s, then {args.duration:g} s a side")
    sides = []
    for hedge in (0.0, args.hedge_seconds):
        print(f"[hedge] hedging {'off' if not hedge else f'after {hedge:g} s'} ...", file=sys.stderr, flush=True)
        sides.append(run_side(args, hedge))
    print()
    print(table(sides))
    print()
    print("held by the tail: writes of the document the store held (a hedge is a write too). settled by a re-read: "
          "writes whose outcome was unknown until the document was read again (a hedge refused while the first "
          "attempt was still out, which had landed). puts a write: the "
          "store's puts of the document ÷ the writes that landed. acknowledged / pushed / pending: the distinct "
          "ids the pushes were answered with, the queue's pushed counter, and its pending jobs in the document "
          "and its segments at the end; all three must be equal, and 200 of the ids, drawn at random, are "
          "looked up by id.")
    bad = [side for side in sides if side["duplicates"] or side["unfound"] or side["errors"]
           or not side["acknowledged"] == side["pushed"] == side["pending"]]
    print(f"check: {'FAIL' if bad else 'PASS'} — every acknowledged push is pending exactly once on both sides")
    return 1 if bad else 0
