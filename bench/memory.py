"""Resident memory of a GroupCommitter holding 100,000 pending jobs.

:func:`measure` starts a fresh interpreter (``python -m bench.memory --child``)
so nothing the benchmark did before skews the numbers. The child starts a
GroupCommitter on a zero-latency MemoryStore, pushes the jobs (about 200-byte
payloads) in batches, collects garbage, and prints one JSON object: current
RSS (``/proc/self/statm``), peak RSS (``VmHWM``; see :func:`_peak_bytes`), the RSS before the
committer existed, and the committed document's size. The whole process is
measured, store included: the MemoryStore's copy of the document is the same
bytes object the committer keeps as its last commit.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

TARGET_MB = 300.0
MB = 1_000_000  # decimal megabytes: the stricter reading of the target
DEFAULT_JOBS = 100_000
DEFAULT_BATCH = 1_000


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_bytes() -> int:
    """Peak RSS of this process image: VmHWM from /proc/self/status.

    ``getrusage().ru_maxrss`` is not used for the verdict: Linux carries it
    across exec, so a child spawned by a large benchmark process reports the
    parent's peak (it is still recorded, as ``ru_maxrss_bytes``).
    """
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return _ru_maxrss_bytes()


def _ru_maxrss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def child(jobs: int, batch: int) -> dict[str, Any]:
    """Run in the fresh process: push ``jobs`` jobs and measure."""
    from bench.config import ENGINE_KEY, QUEUE, payload
    from engine import GroupCommitter, MemoryStore

    gc.collect()
    baseline = _rss_bytes()
    store = MemoryStore()
    committer = GroupCommitter(store, key=ENGINE_KEY).start()
    started = time.perf_counter()
    try:
        for first in range(0, jobs, batch):
            committer.push(QUEUE, [payload(n) for n in range(first, min(first + batch, jobs))])
        push_seconds = time.perf_counter() - started
        gc.collect()
        rss, peak = _rss_bytes(), _peak_bytes()  # before reading the document back allocates more
    finally:
        committer.stop()
    blob = store.get(ENGINE_KEY)
    data = blob.data if blob is not None else b"{}"
    return {
        "jobs": len(orjson.loads(data).get("jobs", ())),
        "batch": batch,
        "commits": committer.stats.commits,
        "push_seconds": round(push_seconds, 2),
        "document_bytes": len(data),
        "baseline_rss_bytes": baseline,
        "rss_bytes": rss,
        "peak_rss_bytes": peak,
        "ru_maxrss_bytes": _ru_maxrss_bytes(),
    }


def measure(jobs: int = DEFAULT_JOBS, batch: int = DEFAULT_BATCH, *, timeout: float = 600.0) -> dict[str, Any]:
    """Run :func:`child` in a fresh interpreter and return its measurements,
    or ``{"error": ...}`` if it failed or took longer than ``timeout``."""
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "bench.memory", "--child", "--jobs", str(jobs), "--batch", str(batch)]
    try:
        done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s"}
    if done.returncode != 0:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-2000:]}"}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def describe(m: dict[str, Any]) -> str:
    """A Markdown paragraph of the measurements with the verdict against the target."""
    if "error" in m:
        return f"memory: FAILED ({m['error']})"
    rss, peak = m["rss_bytes"] / MB, m["peak_rss_bytes"] / MB

    def verdict(value: float) -> str:
        return "PASS" if value <= TARGET_MB else "FAIL"

    return "\n".join(
        [
            f"memory: a fresh process runs a GroupCommitter on a zero-latency MemoryStore and pushes "
            f"{m['jobs']:,} pending jobs (~200-byte payloads) in batches of {m['batch']:,} "
            f"({m['commits']:,} commits, {m['push_seconds']:g} s).",
            f"- resident memory now: {rss:,.1f} MB ({verdict(rss)}, target <= {TARGET_MB:g} MB; "
            f"the interpreter and imports alone: {m['baseline_rss_bytes'] / MB:,.1f} MB)",
            f"- peak resident memory: {peak:,.1f} MB ({verdict(peak)})",
            f"- document size: {m['document_bytes'] / MB:,.1f} MB",
            "(MB = 1,000,000 bytes; RSS from /proc/self/statm, peak from VmHWM in /proc/self/status; "
            "the process includes the MemoryStore's copy of the document.)",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.memory")
    parser.add_argument("--child", action="store_true", help="measure in this process and print JSON")
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS)
    parser.add_argument("--batch", type=int, default=DEFAULT_BATCH)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.jobs, args.batch)))
    else:
        print(describe(measure(args.jobs, args.batch)))


if __name__ == "__main__":
    main()
