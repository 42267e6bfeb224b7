"""Idle long-polling workers for ``python -m bench idle``: one process, N
concurrent claim loops on one asyncio loop (httpx, one keep-alive connection
each), each sending ``POST /api/v1/claim`` with ``wait_seconds=WAIT`` and,
when it is answered, the next one.

Run by :mod:`bench.idle` as ``python -m bench.idlers URL TOKEN N WAIT SECONDS``,
never by hand. Protocol (:mod:`bench.children`): it starts the loops and says
``ready``; on ``mark`` it starts counting answered claims; on ``stop`` (or
after SECONDS, or at end of stdin) it cancels the loops and says
``result {json}``: the claims answered since ``mark`` (every claim if no
``mark`` came), jobs received, errors by kind, its own CPU seconds since
``mark``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from bench.children import own_cpu_seconds, say

ERROR_PAUSE_SECONDS = 0.2
QUEUE = "idle"


@dataclass(slots=True)
class Tally:
    """What the loops saw, and the counts at ``mark``."""

    claims: int = 0
    jobs: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    marked_claims: int = 0
    marked_jobs: int = 0
    marked_cpu: float | None = None
    marked_at: float | None = None


async def _idle(http: httpx.AsyncClient, index: int, wait: float, tally: Tally) -> None:
    """One worker: claim with a long poll, again and again, until cancelled."""
    body = {"worker": f"idler-{index}", "queues": [QUEUE], "wait_seconds": wait}
    while True:
        try:
            response = await http.post("/api/v1/claim", json=body)
        except httpx.HTTPError as exc:
            tally.errors[type(exc).__name__] += 1
            await asyncio.sleep(ERROR_PAUSE_SECONDS)
            continue
        if response.status_code != 200:
            tally.errors[f"HTTP {response.status_code}"] += 1
            await asyncio.sleep(ERROR_PAUSE_SECONDS)
            continue
        tally.claims += 1
        try:
            tally.jobs += len(response.json().get("jobs") or [])
        except ValueError:
            tally.errors["bad JSON"] += 1


def _read_commands(loop: asyncio.AbstractEventLoop, commands: asyncio.Queue[str]) -> None:
    """A thread: stdin lines into ``commands``; end of stdin is ``stop``."""
    for line in sys.stdin:
        loop.call_soon_threadsafe(commands.put_nowait, line.strip())
    loop.call_soon_threadsafe(commands.put_nowait, "stop")


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    tally = Tally()
    loop = asyncio.get_running_loop()
    commands: asyncio.Queue[str] = asyncio.Queue()
    threading.Thread(target=_read_commands, args=(loop, commands), name="stdin", daemon=True).start()
    limits = httpx.Limits(max_connections=args.workers + 10, max_keepalive_connections=args.workers + 10)
    timeout = httpx.Timeout(args.wait + 30, connect=30)
    headers = {"Authorization": f"Bearer {args.token}"}
    deadline = time.monotonic() + args.seconds
    async with httpx.AsyncClient(base_url=args.url, headers=headers, timeout=timeout, limits=limits) as http:
        tasks = [asyncio.create_task(_idle(http, i, args.wait, tally)) for i in range(args.workers)]
        say("ready")
        try:
            while True:
                try:
                    command = await asyncio.wait_for(commands.get(), max(0.0, deadline - time.monotonic()))
                except TimeoutError:
                    break
                if command == "mark":
                    tally.marked_claims, tally.marked_jobs = tally.claims, tally.jobs
                    tally.marked_cpu, tally.marked_at = own_cpu_seconds(), time.monotonic()
                elif command == "stop":
                    break
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "marked": tally.marked_at is not None,
        "claims": tally.claims - tally.marked_claims,
        "jobs": tally.jobs - tally.marked_jobs,
        "errors": dict(tally.errors),
        "cpu": own_cpu_seconds() - (tally.marked_cpu or 0.0),
        "seconds": time.monotonic() - tally.marked_at if tally.marked_at is not None else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.idlers", description=__doc__)
    parser.add_argument("url", help="the node, e.g. http://127.0.0.1:8000")
    parser.add_argument("token", help="its API token")
    parser.add_argument("workers", type=int, help="concurrent claim loops")
    parser.add_argument("wait", type=float, help="wait_seconds of each claim")
    parser.add_argument("seconds", type=float, help="stop on its own after this many seconds")
    args = parser.parse_args()
    result = asyncio.run(_run(args))
    say("result " + orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
