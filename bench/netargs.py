"""The command line of ``python -m bench network``: :class:`NetworkConfig` and :func:`parse_args`."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from dataclasses import dataclass

RUNS = ("limit", "push", "unbatched", "single", "batched")
STORES = ("file", "latency")
DEFAULT_CLIENTS = (1, 8, 64)
DEFAULT_SLOTS = (16, 64)
# Batched drains also run with this many slots: one worker process claims and
# acknowledges hundreds of jobs per request, which is what batching is for.
DEFAULT_BATCHED_SLOTS = (256,)
DEFAULT_DURATION_SECONDS = 3.0
DEFAULT_WARMUP_SECONDS = 0.5
DEFAULT_DRAIN_JOBS = 6_000
DEFAULT_LATENCY_MS = 50.0
DEFAULT_WORKER_PROCESSES = 4
# A drain may take the larger of this and drain_jobs ÷ MIN_JOBS_PER_SECOND.
MIN_TIMEOUT_SECONDS = 120.0
MIN_JOBS_PER_SECOND = 20.0
QUICK = {"duration": 0.5, "warmup": 0.2, "drain_jobs": 100, "worker_processes": 2}


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkConfig:
    """One invocation of ``python -m bench network``. Times are in seconds."""

    runs: tuple[str, ...] = RUNS
    stores: tuple[str, ...] = STORES
    clients: tuple[int, ...] = DEFAULT_CLIENTS
    slots: tuple[int, ...] = DEFAULT_SLOTS
    batched_slots: tuple[int, ...] = DEFAULT_BATCHED_SLOTS
    duration: float = DEFAULT_DURATION_SECONDS
    warmup: float = DEFAULT_WARMUP_SECONDS
    drain_jobs: int = DEFAULT_DRAIN_JOBS
    latency: float = DEFAULT_LATENCY_MS / 1000
    worker_processes: int = DEFAULT_WORKER_PROCESSES
    timeout: float = MIN_TIMEOUT_SECONDS
    lease_watch: bool = True
    command: str = "python -m bench network"


def _names(allowed: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(v.strip() for v in text.split(",") if v.strip()))
        unknown = [n for n in names if n not in allowed]
        if not names or unknown:
            raise argparse.ArgumentTypeError(f"expected a comma list of {', '.join(allowed)}; got {text!r}")
        return tuple(n for n in allowed if n in names)  # always in the table's order

    return parse


def _counts(text: str) -> tuple[int, ...]:
    try:
        values = tuple(dict.fromkeys(int(v.replace("_", "")) for v in text.split(",") if v.strip()))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a comma list of positive integers, got {text!r}") from exc
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected a comma list of positive integers, got {text!r}")
    return values


def _positive_int(text: str) -> int:
    (value,) = _counts(text) if "," not in text else (0,)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from exc
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def parse_args(argv: list[str], *, description: str | None = None) -> NetworkConfig:
    """The run's config from the arguments after ``network``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench network", description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=_names(RUNS), default=RUNS,
                        help=f"comma list of {', '.join(RUNS)} (default: all)")
    parser.add_argument("--stores", type=_names(STORES), default=STORES,
                        help="comma list of file (file:// in a fresh folder) and latency (memory + --latency-ms "
                        "per get and put) (default: both)")
    parser.add_argument("--clients", type=_counts, default=DEFAULT_CLIENTS,
                        help="concurrent push clients, per limit and push run (default: 1,8,64)")
    parser.add_argument("--slots", type=_counts, default=DEFAULT_SLOTS,
                        help="worker slots, per drain run (default: 16,64)")
    parser.add_argument("--batched-slots", type=_counts, default=DEFAULT_BATCHED_SLOTS,
                        help="more worker slots for the batched drains only (default: 256)")
    parser.add_argument("--duration", type=_positive_float,
                        help=f"measured seconds per push run (default: {DEFAULT_DURATION_SECONDS:g})")
    parser.add_argument("--warmup", type=float, help=f"unmeasured seconds before each push window "
                        f"(default: {DEFAULT_WARMUP_SECONDS:g})")
    parser.add_argument("--drain-jobs", type=_positive_int,
                        help=f"jobs per drain run (default: {DEFAULT_DRAIN_JOBS:,})")
    parser.add_argument("--latency-ms", type=float, default=DEFAULT_LATENCY_MS,
                        help=f"ms added to each get and put of the latency store "
                        f"(default: {DEFAULT_LATENCY_MS:g})")
    parser.add_argument("--worker-processes", type=_positive_int,
                        help=f"processes an unbatched or single drain's Workers are spread over "
                        f"(default: {DEFAULT_WORKER_PROCESSES})")
    parser.add_argument("--timeout", type=_positive_float,
                        help=f"seconds a drain may take (default: the larger of {MIN_TIMEOUT_SECONDS:g} and one "
                        f"second per {MIN_JOBS_PER_SECOND:g} jobs)")
    parser.add_argument("--no-lease-watch", dest="lease_watch", action="store_false",
                        help="drain workers without lease watches (WorkerOptions(watch_leases=False)), to measure "
                        "what the watches cost (default: with them, as queueworker runs)")
    parser.add_argument("--quick", action="store_true",
                        help="a short run: 0.5 s push windows, 100 jobs per drain, 2 worker processes")
    args = parser.parse_args(argv)
    if args.warmup is not None and args.warmup < 0:
        parser.error("--warmup must be >= 0")
    if not 0 <= args.latency_ms <= 10_000:
        parser.error("--latency-ms must be between 0 and 10000")

    def pick(value: object, name: str, default: object) -> object:
        return value if value is not None else QUICK[name] if args.quick else default

    drain_jobs = int(pick(args.drain_jobs, "drain_jobs", DEFAULT_DRAIN_JOBS))  # type: ignore[call-overload]
    return NetworkConfig(
        runs=args.runs,
        stores=args.stores,
        clients=args.clients,
        slots=args.slots,
        batched_slots=args.batched_slots,
        duration=float(pick(args.duration, "duration", DEFAULT_DURATION_SECONDS)),  # type: ignore[arg-type]
        warmup=float(pick(args.warmup, "warmup", DEFAULT_WARMUP_SECONDS)),  # type: ignore[arg-type]
        drain_jobs=drain_jobs,
        latency=args.latency_ms / 1000,
        worker_processes=int(
            pick(args.worker_processes, "worker_processes", DEFAULT_WORKER_PROCESSES)  # type: ignore[call-overload]
        ),
        lease_watch=args.lease_watch,
        timeout=args.timeout or max(MIN_TIMEOUT_SECONDS, drain_jobs / MIN_JOBS_PER_SECOND),
        command=shlex.join(["python", "-m", "bench", "network", *argv]),
    )
