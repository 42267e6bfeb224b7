"""``python -m bench``: push throughput and latency of the engine's clients against jqueue 1.0.

Every system runs on the same :class:`engine.MemoryStore`, with a fixed delay
added to every get and put (default 50 ms, close to S3). See
:mod:`bench.__main__` for the command line, :mod:`bench.runner` for what is
measured and :mod:`bench.memory` for the resident-memory check.

The benchmark is a tool, never a timed test: nothing under ``tests/`` runs it.
"""

from __future__ import annotations
