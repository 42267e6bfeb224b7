"""A push load generator: one process, ``--clients`` closed-loop HTTP/1.1
clients on one asyncio loop, each on its own keep-alive connection, each
pushing one job per request (``POST /api/v1/jobs`` with one job and its id)
and waiting for the answer before sending the next.

Run by :mod:`bench.network` (``python -m bench.pushgen …``), never by hand.
It is deliberately cheap, since it shares the machine's cores with the node
it measures: raw asyncio streams and a hand-written HTTP/1.1 exchange, no
HTTP library. Protocol (:mod:`bench.children`): it connects, pushes for
``--warmup`` seconds (unmeasured), says ``ready``, waits for ``go``, pushes
for ``--duration`` seconds, lets the requests in flight finish, and says
``result {json}``: the answered requests and their latencies in the window,
errors by kind, every job id the server acknowledged (warm-up included, for
the exactly-once check), and its own CPU seconds over the window.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson

from bench.children import own_cpu_seconds, say, wait_for
from bench.config import payload

GO_TIMEOUT_SECONDS = 120.0
PATH = "/api/v1/jobs"


@dataclass(slots=True)
class Tally:
    """What the clients saw; ``measuring`` says whether answers count toward the window."""

    measuring: bool = False
    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    ids: list[str] = field(default_factory=list)
    last_answer: float = 0.0


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """One HTTP/1.1 response: status, body, and whether the server closes the connection."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head[:-4].split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length: int | None = None
    chunked = close = False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" and b"chunked" in value:
            chunked = True
        elif name == b"connection" and value == b"close":
            close = True
    if chunked:
        parts = []
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            parts.append(await reader.readexactly(size + 2))
        await reader.readuntil(b"\r\n")  # the empty trailer
        body = b"".join(p[:-2] for p in parts)
    elif length is not None:
        body = await reader.readexactly(length)
    else:
        body, close = await reader.read(), True
    return status, body, close


class PushClient:
    """One closed-loop client on one connection (reopened if the server closes it)."""

    def __init__(self, args: argparse.Namespace, index: int, tally: Tally) -> None:
        self.args = args
        self.index = index
        self.tally = tally
        self.sent = 0
        self.head = (
            f"POST {PATH} HTTP/1.1\r\nHost: {args.host}:{args.port}\r\nAuthorization: Bearer {args.token}\r\n"
            "Content-Type: application/json\r\n"
        ).encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.args.host, self.args.port)

    async def run_until(self, stop_at: float) -> None:
        """Push one job at a time until ``stop_at`` (monotonic); an error ends this client's loop
        only if it cannot reconnect."""
        while time.monotonic() < stop_at:
            if self.writer is None:
                try:
                    await self.connect()
                except OSError as exc:
                    self.tally.errors[f"connect: {type(exc).__name__}"] += 1
                    await asyncio.sleep(0.1)
                    continue
            await self.push_one()

    async def push_one(self) -> None:
        assert self.reader is not None and self.writer is not None
        job_id = f"{self.args.prefix}-{self.index}-{self.sent}"
        self.sent += 1
        body = orjson.dumps({"queue": self.args.queue, "jobs": [{"id": job_id, "payload": payload(self.sent)}]})
        started = time.monotonic()
        try:
            self.writer.write(self.head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
            status, answer, close = await asyncio.wait_for(_read_response(self.reader), self.args.timeout)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError) as exc:
            self.tally.errors[type(exc).__name__] += 1
            self.close()
            return
        now = time.monotonic()
        if 200 <= status < 300:
            if self.tally.measuring:
                self.tally.latencies.append(now - started)
                self.tally.last_answer = now
            if self.args.expect_ids:
                ids = orjson.loads(answer).get("ids")
                if ids != [job_id]:
                    self.tally.errors["unexpected ids"] += 1
                self.tally.ids.extend(ids or [])
        else:
            self.tally.errors[f"HTTP {status}"] += 1
        if close:
            self.close()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    tally = Tally()
    clients = [PushClient(args, i, tally) for i in range(args.clients)]
    await asyncio.gather(*(c.connect() for c in clients))
    warm_until = time.monotonic() + args.warmup
    await asyncio.gather(*(c.run_until(warm_until) for c in clients))
    say("ready")
    loop = asyncio.get_running_loop()
    if not await loop.run_in_executor(None, wait_for, "go", GO_TIMEOUT_SECONDS):
        return {"aborted": "no go"}
    tally.measuring = True
    cpu0, started = own_cpu_seconds(), time.monotonic()
    tally.last_answer = started
    await asyncio.gather(*(c.run_until(started + args.duration) for c in clients))
    cpu = own_cpu_seconds() - cpu0
    for client in clients:
        client.close()
    return {
        "requests": len(tally.latencies),
        "seconds": tally.last_answer - started,
        "latencies": tally.latencies,
        "errors": dict(tally.errors),
        "ids": tally.ids,
        "cpu": cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pushgen", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token", default="-")
    parser.add_argument("--queue", required=True)
    parser.add_argument("--prefix", required=True, help="job id prefix, unique per run")
    parser.add_argument("--clients", type=int, required=True)
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for one answer")
    parser.add_argument("--expect-ids", action="store_true", help="answers are the broker's 201 {ids}")
    args = parser.parse_args()
    result = asyncio.run(_run(args))
    say("result " + orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
