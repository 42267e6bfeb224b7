"""What every benchmark report shares: the machine's facts, table cells and
percentiles. Needs nothing beyond the standard library, so ``python -m bench
network`` runs without the bench extra (jqueue)."""

from __future__ import annotations

import math
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any


def machine_facts() -> dict[str, Any]:
    """nproc, CPU model, memory, OS and the versions that matter."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
        mem_gib = round(kib / 1024**2, 1)
    except (OSError, StopIteration, ValueError):
        pass

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": model,
        "memory_gib": mem_gib,
        "os": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "jqueue": version("jqueue"),
        "orjson": version("orjson"),
        "pydantic": version("pydantic"),
        "git": _git_revision(),
    }


def _git_revision() -> str:
    """The checkout's commit, with "-dirty" when it has uncommitted changes."""
    root = Path(__file__).resolve().parent.parent
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip() or "unknown"


def num(value: float | None, fmt: str) -> str:
    """A table cell: ``value`` formatted with ``fmt``, or a dash when it was not measured."""
    return "—" if value is None else format(value, fmt)


def percentile(ordered: list[float], q: float) -> float | None:
    """Nearest-rank percentile of sorted seconds, in milliseconds."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] * 1000


__all__ = ["machine_facts", "num", "percentile"]
