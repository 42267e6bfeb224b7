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
MAX_CLAIM_JOBS = 1000
MAX_DELAY_SECONDS = 366 * 24 * 3600.0
MAX_LEASE_SECONDS = 24 * 3600.0


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
    * ``max_error_chars`` — a failure's error text is cut to its last N characters.
    """

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    dead_letter_limit: int = DEFAULT_DEAD_LETTER_LIMIT
    backoff_base_seconds: float = DEFAULT_BACKOFF_BASE_SECONDS
    backoff_cap_seconds: float = DEFAULT_BACKOFF_CAP_SECONDS
    max_error_chars: int = DEFAULT_MAX_ERROR_CHARS

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if not 0 < self.lease_seconds <= MAX_LEASE_SECONDS:
            raise ValueError(f"lease_seconds must be in (0, {MAX_LEASE_SECONDS:g}]")
        if self.max_payload_bytes < 1 or self.dead_letter_limit < 0 or self.max_error_chars < 1:
            raise ValueError("limits must be positive")
        if self.backoff_base_seconds < 0 or self.backoff_cap_seconds < self.backoff_base_seconds:
            raise ValueError("backoff needs 0 <= base <= cap")

    def backoff(self, attempts: int) -> float:
        """Seconds to wait before the retry that follows failed attempt number ``attempts``."""
        exponent = min(max(attempts - 1, 0), 32)  # bound the power; the cap applies anyway
        return min(self.backoff_base_seconds * 2.0**exponent, self.backoff_cap_seconds)
