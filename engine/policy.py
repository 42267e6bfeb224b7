"""Tunable limits and defaults, as named constants and one frozen ``Policy``.

Engine constructors take a ``Policy``; the Django settings translate
environment variables into one in a single place. The engine never reads
``os.environ``.
"""

from __future__ import annotations

from dataclasses import dataclass

DOCUMENT_KEY = "queue.json"
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_LEASE_SECONDS = 30.0
DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024
DEFAULT_DEAD_LETTER_LIMIT = 1000
DEFAULT_BACKOFF_BASE_SECONDS = 1.0
DEFAULT_BACKOFF_CAP_SECONDS = 300.0
DEFAULT_MAX_ERROR_CHARS = 8192
# A job keeps this many finished attempts in its history, and each one keeps
# at most HISTORY_ERROR_CHARS of its error (the whole last error is in
# last_error): enough for a timeline without letting a flapping job grow.
HISTORY_ATTEMPTS = 10
HISTORY_ERROR_CHARS = 500
# The dedup window: a job's id is remembered after the job leaves the document
# (completed, purged, or a dead letter dropped), so that a push retried after
# its answer was lost does not run the job again. At most this many ids, each
# for at most this long; the window costs the document ~35 bytes per id.
DEDUP_WINDOW_IDS = 10_000
DEDUP_WINDOW_SECONDS = 15 * 60.0
MAX_CLAIM_JOBS = 1000
MAX_DELAY_SECONDS = 366 * 24 * 3600.0
MAX_LEASE_SECONDS = 24 * 3600.0
# Format 2 (segments): off unless segment_jobs > 0. A queue keeps up to
# HEAD_JOBS pending jobs at its front in the document; beyond them, once its
# tail holds segment_jobs more, the leader seals them into a segment object.
# When the front holds fewer than REFILL_BELOW, the next segment is read back.
DEFAULT_SEGMENT_JOBS = 0
DEFAULT_HEAD_JOBS = 1000
DEFAULT_REFILL_BELOW = 500
# Runs of sealed segments are merged into segments of up to this many jobs,
# so that a backlog of millions needs a few hundred references, not thousands.
DEFAULT_MERGE_JOBS = 16384
# Format 3 (delayed segments): off unless delayed_horizon_seconds > 0. Delayed
# jobs due more than that far ahead may then leave the document for delayed
# segments, and come back a refill lead before they are due.
DEFAULT_DELAYED_HORIZON_SECONDS = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """Limits and defaults applied by the transitions.

    * ``max_attempts`` — default attempts before a job goes to the dead letters;
    * ``lease_seconds`` — default lease length for a claim;
    * ``max_payload_bytes`` — limit on one job's encoded payload;
    * ``dead_letter_limit`` — the dead-letter list keeps at most this many
      (oldest dropped first, counted per queue as ``dead_dropped``);
    * ``backoff_base_seconds`` / ``backoff_cap_seconds`` — retry delay after
      attempt *n* is ``min(base * 2**(n-1), cap)``;
    * ``max_error_chars`` — a failure's error text is cut to its last N characters;
    * ``dedup_window_ids`` / ``dedup_window_seconds`` — how many ids of jobs
      that left the document are remembered, and for how long: a push with
      such an id is answered with that id and enqueues nothing (0 turns the
      window off).
    * ``segment_jobs`` / ``head_jobs`` / ``refill_below`` — format 2: seal a
      queue's pending jobs beyond its first ``head_jobs`` into segment
      objects of ``segment_jobs`` jobs, and read the next segment back when
      fewer than ``refill_below`` are left in front of it (see
      ``docs/format.md``). ``segment_jobs = 0`` (the default) keeps format 1.
      With several queues holding pending jobs, each gets an equal share of
      ``head_jobs`` and ``segment_jobs`` (at least a tenth), so the document
      stays about the same size. Adjacent sealed segments are merged into
      segments of up to ``merge_jobs``.
    * ``delayed_horizon_seconds`` — format 3, with segments on: once a
      queue's delayed jobs in the document pass its share of ``head_jobs``,
      those due more than this many seconds ahead move to *delayed
      segments* (objects in due order, outside the FIFO order), and come
      back, a front share a commit, a refill lead before the first of them
      is due. 0 (the default) keeps delayed jobs in the document and writes
      format 2 (see docs/format.md, "Delayed jobs beyond a window").
    """

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    dead_letter_limit: int = DEFAULT_DEAD_LETTER_LIMIT
    backoff_base_seconds: float = DEFAULT_BACKOFF_BASE_SECONDS
    backoff_cap_seconds: float = DEFAULT_BACKOFF_CAP_SECONDS
    max_error_chars: int = DEFAULT_MAX_ERROR_CHARS
    dedup_window_ids: int = DEDUP_WINDOW_IDS
    dedup_window_seconds: float = DEDUP_WINDOW_SECONDS
    segment_jobs: int = DEFAULT_SEGMENT_JOBS
    head_jobs: int = DEFAULT_HEAD_JOBS
    refill_below: int = DEFAULT_REFILL_BELOW
    merge_jobs: int = DEFAULT_MERGE_JOBS
    delayed_horizon_seconds: float = DEFAULT_DELAYED_HORIZON_SECONDS

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if not 0 < self.lease_seconds <= MAX_LEASE_SECONDS:
            raise ValueError(f"lease_seconds must be in (0, {MAX_LEASE_SECONDS:g}]")
        if self.max_payload_bytes < 1 or self.dead_letter_limit < 0 or self.max_error_chars < 1:
            raise ValueError("limits must be positive")
        if self.backoff_base_seconds < 0 or self.backoff_cap_seconds < self.backoff_base_seconds:
            raise ValueError("backoff needs 0 <= base <= cap")
        if self.dedup_window_ids < 0 or not 0 <= self.dedup_window_seconds < float("inf"):
            raise ValueError("the dedup window needs a count >= 0 and a finite number of seconds >= 0")
        if self.segment_jobs < 0 or self.head_jobs < 1 or not 0 < self.refill_below <= self.head_jobs:
            raise ValueError("segments need segment_jobs >= 0, head_jobs >= 1 and 0 < refill_below <= head_jobs")
        if self.merge_jobs < max(self.segment_jobs, 1):
            raise ValueError("merge_jobs must be at least segment_jobs")
        if not 0 <= self.delayed_horizon_seconds <= MAX_DELAY_SECONDS:
            raise ValueError(f"delayed_horizon_seconds must be in [0, {MAX_DELAY_SECONDS:g}]")

    def backoff(self, attempts: int) -> float:
        """Seconds to wait before the retry that follows failed attempt number ``attempts``."""
        exponent = min(max(attempts - 1, 0), 32)  # bound the power; the cap applies anyway
        return min(self.backoff_base_seconds * 2.0**exponent, self.backoff_cap_seconds)
