"""``python -m bench failover``: how long pushes stop when the leader stops,
gracefully or by a crash, side by side in one run.

Processes (all on this machine):

* **two daphne broker nodes** (:class:`bench.node.Node`) on one ``file://``
  store, with ``QUEUE_HEARTBEAT_SECONDS`` = ``--heartbeat`` and
  ``QUEUE_TAKEOVER_SECONDS`` = ``--takeover`` (the app's defaults, 2 and 10);
* **this process**: a producer thread that pushes one job at a time, every
  ``--every`` seconds, through :class:`engine.BrokerClient` given both nodes
  (as a producer of a cluster is), and records when each push was answered.

Each round stops the node that leads, alternating a graceful stop (SIGTERM,
as a deploy or ``docker stop`` sends: it hands the lead over) and a crash
(SIGKILL), ``--rounds`` of each; waits until the other node leads and a push
has been answered since; then starts the stopped node again, as a standby,
and lets the producer run ``--settle`` seconds before the next round. A
round's figure is the longest time between two answered pushes from its
signal until then: how long the producer's pushes stopped.

At the end every answered push is looked up by id on the leader: each must
be there (I2). Exit status 0 when they all are; 1 otherwise, or if a node
failed.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from bench.children import wait_until
from bench.facts import machine_facts
from bench.node import Node, NodeError
from engine import BrokerClient, EngineError

DEFAULTS = {"rounds": 3, "heartbeat": 2.0, "takeover": 10.0, "every": 0.02, "settle": 3.0}
KINDS = (("graceful (SIGTERM)", signal.SIGTERM), ("crash (SIGKILL)", signal.SIGKILL))


@dataclass(slots=True)
class Producer:
    """Pushes one job at a time until stopped; records each answer's time."""

    client: BrokerClient
    every: float
    answered: list[tuple[float, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            job_id = f"failover-{n}"
            try:
                self.client.push("failover", [n], ids=[job_id])
            except EngineError as exc:  # the client's retry budget ran out: count it, go on
                self.errors.append(f"{type(exc).__name__}: {exc}")
            else:
                self.answered.append((time.monotonic(), job_id))
            n += 1
            self.stop.wait(self.every)

    def longest_pause(self, since: float) -> float:
        """The longest time between two answers from ``since`` on (``since``
        itself counting as the first)."""
        times = [since, *(at for at, _ in list(self.answered) if at > since)]
        return max(later - earlier for earlier, later in pairwise(times))


@dataclass(slots=True)
class Round:
    kind: str
    pause: float
    exit_status: int | None


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench failover", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=DEFAULTS["rounds"], help="rounds of each kind (default 3)")
    parser.add_argument("--heartbeat", type=float, default=DEFAULTS["heartbeat"], help="QUEUE_HEARTBEAT_SECONDS (2)")
    parser.add_argument("--takeover", type=float, default=DEFAULTS["takeover"], help="QUEUE_TAKEOVER_SECONDS (10)")
    parser.add_argument("--every", type=float, default=DEFAULTS["every"], help="seconds between pushes (0.02)")
    parser.add_argument("--settle", type=float, default=DEFAULTS["settle"],
                        help="seconds of pushes between a restart and the next round (3)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or not 0 < args.heartbeat < args.takeover or args.every < 0 or args.settle < 0:
        parser.error("need --rounds >= 1, 0 < --heartbeat < --takeover, --every >= 0 and --settle >= 0")
    return args


def _leader(nodes: list[Node]) -> Node:
    for node in nodes:
        health = node.health()
        if health is not None and health.get("role") == "leader":
            return node
    raise NodeError("no node leads")


def run_round(kind: str, sig: signal.Signals, nodes: list[Node], producer: Producer, args: argparse.Namespace) -> Round:
    """Stop the leader with ``sig``, wait for the other to lead and a push to
    be answered, restart the stopped node as a standby."""
    leader = _leader(nodes)
    other = next(node for node in nodes if node is not leader)
    assert leader.child is not None
    proc = leader.child.proc
    signalled = time.monotonic()
    proc.send_signal(sig)
    bound = 3 * args.takeover + 30
    wait_until(lambda: (other.health() or {}).get("role") == "leader", bound, f"{other.name} to take over")
    taken = time.monotonic()
    wait_until(lambda: producer.answered and producer.answered[-1][0] > taken, bound, "a push after the takeover")
    pause = producer.longest_pause(signalled)
    try:
        status: int | None = proc.wait(30)
    except subprocess.TimeoutExpired:  # it did not exit: kill it, and say so
        proc.kill()
        proc.wait(10)
        status = None
    leader.start(lead=False)
    time.sleep(args.settle)
    return Round(kind=kind, pause=pause, exit_status=status)


def table(rounds: list[Round]) -> str:
    lines = ["| stop | rounds | pushes stopped for, s: min | median | max | exit statuses |",
             "|---|--:|--:|--:|--:|---|"]
    for kind, _ in KINDS:
        mine = [r for r in rounds if r.kind == kind]
        pauses = [r.pause for r in mine]
        statuses = ", ".join(str(r.exit_status) for r in mine)
        lines.append(f"| {kind} | {len(mine)} | {min(pauses):.2f} | {statistics.median(pauses):.2f} | "
                     f"{max(pauses):.2f} | {statuses} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    facts = machine_facts()
    print(f"command: `{shlex.join(['python', '-m', 'bench', 'failover', *argv])}`")
    print(f"machine: nproc={facts['nproc']}, {facts['cpu']}; code at git {facts['git']}")
    print(f"conditions: two daphne nodes on one file:// store, heartbeat {args.heartbeat:g} s, takeover after "
          f"{args.takeover:g} s without a commit; one producer pushing a job every {args.every:g} s through "
          f"BrokerClient given both nodes; {args.rounds} round(s) of each stop, alternating")
    settings = {"QUEUE_HEARTBEAT_SECONDS": str(args.heartbeat), "QUEUE_TAKEOVER_SECONDS": str(args.takeover)}
    with tempfile.TemporaryDirectory(prefix="bench-failover-") as folder:
        tmp = Path(folder)
        store_url = (tmp / "store").as_uri()
        first = Node(tmp, store_url=store_url, name="node-a", settings=settings)
        second = Node(tmp, store_url=store_url, name="node-b", token=first.token, settings=settings)
        nodes = [first, second]
        try:
            first.start()
            second.start(lead=False)
            client = BrokerClient([first.url, second.url], token=first.token, retry_seconds=3 * args.takeover + 30)
            producer = Producer(client, args.every)
            thread = threading.Thread(target=producer.run, name="producer", daemon=True)
            thread.start()
            time.sleep(args.settle)
            rounds = []
            for n in range(args.rounds):
                for kind, sig in KINDS:
                    print(f"[failover] round {n + 1}: {kind} ...", file=sys.stderr, flush=True)
                    rounds.append(run_round(kind, sig, nodes, producer, args))
                    print(f"[failover]   pushes stopped for {rounds[-1].pause:.2f} s", file=sys.stderr, flush=True)
            producer.stop.set()
            thread.join(3 * args.takeover + 30)
            answered = [job_id for _, job_id in producer.answered]
            missing = [job_id for job_id in answered if _missing(client, job_id)]
            client.close()
        except (NodeError, TimeoutError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        finally:
            for node in nodes:
                node.stop()
    print()
    print(table(rounds))
    print()
    print("pushes stopped for: the longest time between two answered pushes, from the signal until the other node "
          "led and had answered a push. exit statuses: the stopped daphne's (0: it stopped cleanly; -9: killed).")
    print(f"pushes answered: {len(answered):,}; errors (a push's retry budget ran out): {len(producer.errors)}; "
          f"missing on the leader at the end: {len(missing)}")
    bad = bool(missing)
    print(f"check: {'FAIL' if bad else 'PASS'} — every answered push is in the queue")
    return 1 if bad else 0


def _missing(client: BrokerClient, job_id: str) -> bool:
    try:
        client.get_job(job_id)
    except EngineError:
        return True
    return False
