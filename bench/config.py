"""The benchmark's settings and the job payload every system pushes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

SYSTEMS = ("group", "direct", "jqueue-broker", "jqueue-direct")
DEFAULT_SUBMITTERS = (1, 16, 256, 2048)
DEFAULT_DEPTHS = (0, 10_000, 50_000, 100_000)
QUICK_SUBMITTERS = (1, 256)
QUICK_DEPTHS = (0, 10_000)
QUEUE = "bench"
ENGINE_KEY = "queue.json"
JQUEUE_KEY = "jqueue.json"
# DirectClient is the layer-1 baseline: one OS thread per submitter.
DIRECT_MAX_SUBMITTERS = 256
# Each DirectClient thread parses the whole document on every attempt, and
# every thread can be mid-parse at once: measured ~10 KB of memory per job
# and thread (16 threads at depth 50,000 peaked at 8.4 GB).
DIRECT_BYTES_PER_JOB = 10_000
DIRECT_MEMORY_BUDGET = 4 * 1024**3


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchConfig:
    """One invocation of the benchmark. Times are in seconds."""

    systems: tuple[str, ...] = SYSTEMS
    submitters: tuple[int, ...] = DEFAULT_SUBMITTERS
    depths: tuple[int, ...] = DEFAULT_DEPTHS
    duration: float = 3.0
    warmup: float = 1.0
    latency: float = 0.050
    # Bytes per second each get and put also pays (latency + size / bandwidth);
    # 0: unlimited. 100 MB/s is about one S3 stream in the same region.
    bandwidth: float = 100e6
    op_timeout: float = 30.0
    memory: bool = True
    json_path: str | None = None
    command: str = "python -m bench"
    extra: dict[str, Any] = field(default_factory=dict)

    def limit(self, submitters: int) -> float | None:
        """The closed-loop ceiling in ops/s: each submitter needs at least one
        store round trip per push. ``None`` when there is no latency."""
        return submitters / self.latency if self.latency > 0 else None


def payload(n: int) -> dict[str, Any]:
    """A realistic job payload of about 200 bytes of JSON (``n`` varies it)."""
    return {
        "type": "send_email",
        "to": f"user{n % 100_000:05d}@example.com",
        "template": "weekly-report-v2",
        "subject": "Your weekly report is ready",
        "locale": "en-GB",
        "account": 100_000 + n % 900_000,
        "tags": ["report", "weekly", "email"],
        "n": n,
    }


def payload_bytes(n: int) -> bytes:
    """:func:`payload` as JSON bytes (what jqueue stores, base64-encoded)."""
    return orjson.dumps(payload(n))
