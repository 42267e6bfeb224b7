"""A store that injects faults steered at run time by a control file: the chaos harness's nemesis.

:class:`FaultStore` wraps any :class:`ObjectStore` and, on each request,
consults a small JSON *control file* (re-read only when it changes) that says
which faults to inject, with what probability::

    {
      "error": 0.2,          # the request fails with StoreUnavailable and never reaches the store
      "lost": 0.1,           # a write lands, then reports StoreUnavailable (the reply was lost)
      "slow": 0.3, "slow_seconds": 0.5,   # the request is delayed; a write is delayed while
                                          # sending its body, in the middle of the write
      "hang": 0.0, "hang_seconds": 10,    # the request hangs, then fails with StoreUnavailable
      "ops": ["put"],        # the calls the faults apply to (default: every call)
      "freeze": "token-7",   # the next write stops this process (SIGSTOP) in the middle of
                             # sending its body, once per distinct token; someone else must SIGCONT it
      "unconditional": true, # writes drop their If-Match / If-None-Match, as a store or proxy
                             # that ignores them would (engine.storecheck must refuse such a store)
      "clock_offset_seconds": -12.5,  # this process's broker reads its wall clock this far off
                             # (FaultStore.clock, which queueadmin.runtime gives the broker of a
                             # faults+ store): a clock that runs ahead or behind, or steps
      "seed": 1              # seeds this process's fault dice when the file changes
    }

A missing or empty control file means no faults; a control file that cannot
be parsed also means no faults (and is reported once in the log), so a
half-written file never breaks the store. Writers should replace it with a
rename anyway.

Every request and every injected fault is counted, and the counts are written
to a *stats file* (``<control>.stats``, JSON, replaced with a rename) at most
every :data:`STATS_INTERVAL_SECONDS`, so another process can measure this
one's request rate. Selected by URL: ``faults+<inner store URL>`` with a
``fault_control=<absolute path>`` query parameter (see :func:`open_fault_store`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, overload
from urllib.parse import parse_qsl, urlencode

import orjson

from engine.errors import StoreConfigError, StoreUnavailable
from engine.model import utc_now
from engine.stores.base import Blob, ObjectStore
from engine.stores.wrappers import WrappedStore

log = logging.getLogger(__name__)

SCHEME_PREFIX = "faults+"
CONTROL_PARAMETER = "fault_control"
STATS_SUFFIX = ".stats"
STATS_INTERVAL_SECONDS = 0.2
DEFAULT_SLOW_SECONDS = 0.5
DEFAULT_HANG_SECONDS = 10.0
OPS = ("get", "etag", "put", "delete", "list")
KINDS = ("error", "lost", "slow", "hang", "freeze", "unconditional")


class FaultPlan:
    """The faults a control file asks for (all off by default)."""

    __slots__ = ("clock_offset", "error", "freeze", "hang", "hang_seconds", "lost", "ops", "seed", "slow",
                 "slow_seconds", "unconditional")

    def __init__(self, spec: dict[str, Any] | None = None) -> None:
        spec = spec or {}
        self.error = _probability(spec, "error")
        self.lost = _probability(spec, "lost")
        self.slow = _probability(spec, "slow")
        self.hang = _probability(spec, "hang")
        self.slow_seconds = _seconds(spec, "slow_seconds", DEFAULT_SLOW_SECONDS)
        self.hang_seconds = _seconds(spec, "hang_seconds", DEFAULT_HANG_SECONDS)
        ops = spec.get("ops", OPS)
        if not isinstance(ops, list | tuple) or not set(ops) <= set(OPS):
            raise ValueError(f"ops must be a list of {', '.join(OPS)}, got {ops!r}")
        self.ops = frozenset(ops)
        freeze = spec.get("freeze")
        self.freeze = freeze if isinstance(freeze, str) and freeze else None
        unconditional = spec.get("unconditional", False)
        if not isinstance(unconditional, bool):
            raise ValueError(f"unconditional must be true or false, got {unconditional!r}")
        self.unconditional = unconditional
        offset = spec.get("clock_offset_seconds", 0.0)
        if isinstance(offset, bool) or not isinstance(offset, int | float) or not -86400 <= offset <= 86400:
            raise ValueError(f"clock_offset_seconds must be between -86400 and 86400, got {offset!r}")
        self.clock_offset = timedelta(seconds=offset)
        seed = spec.get("seed")
        self.seed = seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def _probability(spec: dict[str, Any], name: str) -> float:
    value = spec.get(name, 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be a probability between 0 and 1, got {value!r}")
    return float(value)


def _seconds(spec: dict[str, Any], name: str, default: float) -> float:
    value = spec.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 3600:
        raise ValueError(f"{name} must be between 0 and 3600 seconds, got {value!r}")
    return float(value)


class _SlowParts(Sequence[bytes]):
    """The parts of a write, with ``hook`` run when the store starts sending
    them: a store iterates its parts while it writes them out (the file store
    before it links the new version, S3 while it uploads), so a delay or a stop
    here happens in the middle of a write, as a slow upload or a paused
    process would."""

    def __init__(self, parts: Sequence[bytes], hook: Callable[[], None]) -> None:
        self._parts = parts
        self._hook: Callable[[], None] | None = hook

    def _run_hook(self) -> None:
        hook, self._hook = self._hook, None
        if hook is not None:
            hook()

    def __iter__(self) -> Iterator[bytes]:
        self._run_hook()
        return iter(self._parts)

    @overload
    def __getitem__(self, index: int) -> bytes: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[bytes]: ...
    def __getitem__(self, index: int | slice) -> bytes | Sequence[bytes]:
        self._run_hook()
        return self._parts[index]

    def __len__(self) -> int:
        return len(self._parts)


class FaultStore(WrappedStore):
    """Wraps ``inner`` and injects the faults ``control`` (a file path) asks for.

    Thread-safe. Does the inner store's I/O plus one ``stat`` of the control
    file per request (and a read when it changed), and writes the stats file
    now and then. Raises what the inner store raises, plus StoreUnavailable
    for injected faults.
    """

    def __init__(self, inner: ObjectStore, *, control: str | os.PathLike[str]) -> None:
        path = Path(control)
        if not path.is_absolute():
            raise StoreConfigError(f"fault control file must be an absolute path, got {str(control)!r}")
        super().__init__(inner)
        self.control = path
        self.stats_path = path.with_name(path.name + STATS_SUFFIX)
        self._lock = threading.Lock()
        self._plan = FaultPlan()
        self._plan_key: tuple[int, int] | None = None
        self._bad_control: str | None = None
        self._random = random.Random()
        self._frozen: list[str] = []
        self.requests = dict.fromkeys(OPS, 0)
        self.faults = dict.fromkeys(KINDS, 0)
        self._stats_written = 0.0

    def describe(self) -> str:
        return f"faults({self.inner.describe()}, control={self.control})"

    # -- the control file and the stats file ------------------------------------

    def _current_plan(self) -> FaultPlan:
        """The plan in the control file now (cached by mtime and size). Caller holds the lock."""
        try:
            st = os.stat(self.control)
        except OSError:
            self._plan, self._plan_key = FaultPlan(), None
            return self._plan
        key = (st.st_mtime_ns, st.st_size)
        if key != self._plan_key:
            self._plan_key = key
            try:
                spec = orjson.loads(self.control.read_bytes()) if st.st_size else {}
                if not isinstance(spec, dict):
                    raise ValueError("the control file must hold a JSON object")
                self._plan = FaultPlan(spec)
                self._bad_control = None
            except (OSError, ValueError) as exc:  # orjson.JSONDecodeError is a ValueError
                if self._bad_control != str(exc):
                    log.warning("fault store: ignoring control file %s: %s", self.control, exc)
                    self._bad_control = str(exc)
                self._plan = FaultPlan()
            if self._plan.seed is not None:
                self._random.seed(self._plan.seed)
        return self._plan

    def _write_stats(self, *, force: bool = False) -> None:
        """Replace the stats file, at most every STATS_INTERVAL_SECONDS. Caller holds the lock."""
        now = time.monotonic()
        if not force and now - self._stats_written < STATS_INTERVAL_SECONDS:
            return
        self._stats_written = now
        stats = {"pid": os.getpid(), "requests": self.requests, "faults": self.faults, "frozen": self._frozen}
        tmp = self.stats_path.with_name(f".{self.stats_path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_bytes(orjson.dumps(stats))
            os.replace(tmp, self.stats_path)
        except OSError as exc:  # counting must never break the store
            log.warning("fault store: cannot write %s: %s", self.stats_path, exc)

    def clock(self) -> datetime:
        """The wall clock the control file asks this process to read: now,
        off by ``clock_offset_seconds`` (UTC). For the broker of a node on
        this store, so that a chaos run can set its clock ahead, behind, or
        step it back; one ``stat`` of the control file per call."""
        with self._lock:
            offset = self._current_plan().clock_offset
        return utc_now() + offset

    def stats(self) -> dict[str, Any]:
        """This process's counts (no I/O): requests per call, faults per kind."""
        with self._lock:
            return {"requests": dict(self.requests), "faults": dict(self.faults), "frozen": list(self._frozen)}

    # -- rolling the dice -------------------------------------------------------

    def _roll(self, op: str) -> tuple[str | None, FaultPlan]:
        """Count the request and choose its fault (None, error, lost, slow, hang, freeze)."""
        with self._lock:
            self.requests[op] += 1
            plan = self._current_plan()
            fault: str | None = None
            if op == "put" and plan.freeze is not None and plan.freeze not in self._frozen:
                self._frozen.append(plan.freeze)
                fault = "freeze"
            elif op in plan.ops:
                dice = self._random.random()
                for kind, chance in (("error", plan.error), ("hang", plan.hang), ("slow", plan.slow)):
                    if dice < chance:
                        fault = kind
                        break
                    dice -= chance
                if fault is None and op in ("put", "delete") and self._random.random() < plan.lost:
                    fault = "lost"
            if fault is not None:
                self.faults[fault] += 1
            self._write_stats(force=fault == "freeze")
            return fault, plan

    def _before(self, op: str) -> tuple[str | None, FaultPlan]:
        """Roll for ``op`` and play the faults that happen before the request is sent."""
        fault, plan = self._roll(op)
        if fault == "error":
            raise StoreUnavailable(f"injected: {op} failed")
        if fault == "hang":
            time.sleep(plan.hang_seconds)
            raise StoreUnavailable(f"injected: {op} hung for {plan.hang_seconds:g}s")
        if fault == "slow" and op != "put":
            time.sleep(plan.slow_seconds)
        return fault, plan

    @staticmethod
    def _freeze() -> None:
        log.warning("fault store: stopping this process (SIGSTOP) in the middle of a write, as asked:\n%s",
                    "".join(traceback.format_stack(limit=12)))
        os.kill(os.getpid(), signal.SIGSTOP)

    # -- the contract -------------------------------------------------------------

    def get(self, key: str) -> Blob | None:
        self._before("get")
        return self.inner.get(key)

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        self._before("get")
        return self.inner.get_range(key, start, length)

    def etag(self, key: str) -> str | None:
        self._before("etag")
        return self.inner.etag(key)

    def put_parts(
        self, key: str, parts: Sequence[bytes], *, if_match: str | None = None, if_none_match: bool = False
    ) -> str:
        fault, plan = self._before("put")
        if plan.unconditional and (if_match is not None or if_none_match):
            with self._lock:
                self.faults["unconditional"] += 1
            if_match, if_none_match = None, False
        if fault == "slow":
            seconds = plan.slow_seconds
            parts = _SlowParts(parts, lambda: time.sleep(seconds))
        elif fault == "freeze":
            parts = _SlowParts(parts, self._freeze)
        etag = self.inner.put_parts(key, parts, if_match=if_match, if_none_match=if_none_match)
        if fault == "lost":
            raise StoreUnavailable("injected: the write landed but its reply was lost")
        return etag

    def delete(self, key: str) -> None:
        fault, _ = self._before("delete")
        self.inner.delete(key)
        if fault == "lost":
            raise StoreUnavailable("injected: the delete landed but its reply was lost")

    def list(self, prefix: str = "") -> list[str]:
        self._before("list")
        return self.inner.list(prefix)

    def close(self) -> None:
        with self._lock:
            self._write_stats(force=True)
        self.inner.close()


def fault_store_url(inner_url: str, control: str | os.PathLike[str]) -> str:
    """The ``faults+`` URL that wraps ``inner_url`` in a FaultStore steered by ``control``."""
    # Plain string work: urlunsplit would drop the "//" of schemes it does not know (memory://).
    separator = "&" if "?" in inner_url else "?"
    return f"{SCHEME_PREFIX}{inner_url}{separator}{urlencode({CONTROL_PARAMETER: os.fspath(control)})}"


def open_fault_store(url: str, open_inner: Callable[[str], ObjectStore]) -> FaultStore:
    """Open ``faults+<inner URL>?...&fault_control=/abs/path``: the inner store
    (opened with ``open_inner``, without the ``fault_control`` parameter),
    wrapped in a FaultStore. Raises StoreConfigError for a malformed URL."""
    if not url.startswith(SCHEME_PREFIX):
        raise StoreConfigError(f"a fault store URL starts with {SCHEME_PREFIX}, got {url!r}")
    base, _, raw_query = url[len(SCHEME_PREFIX) :].partition("?")
    query = parse_qsl(raw_query, keep_blank_values=True)
    controls = [value for name, value in query if name == CONTROL_PARAMETER]
    if len(controls) != 1 or not controls[0]:
        raise StoreConfigError(f"a fault store URL needs exactly one {CONTROL_PARAMETER}=/absolute/path, got {url!r}")
    rest = [(name, value) for name, value in query if name != CONTROL_PARAMETER]
    inner = open_inner(f"{base}?{urlencode(rest)}" if rest else base)
    try:
        return FaultStore(inner, control=controls[0])
    except StoreConfigError:
        with contextlib.suppress(Exception):
            inner.close()
        raise
