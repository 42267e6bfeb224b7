"""The chaos harness: real nodes, a seeded nemesis, and a checker over the recorded history.

Run it with ``python -m chaos --seed N --duration S --store file|s3``; see
:mod:`chaos.__main__` for the options and docs/reliability.md for its figures.
Modules: :mod:`~chaos.cluster` (processes), :mod:`~chaos.clients` (producers
and workers), :mod:`~chaos.watcher` (who sees which version),
:mod:`~chaos.nemesis` (the faults), :mod:`~chaos.history` (what is recorded),
:mod:`~chaos.checker` (what must hold), :mod:`~chaos.run` and
:mod:`~chaos.report`.
"""

from __future__ import annotations
