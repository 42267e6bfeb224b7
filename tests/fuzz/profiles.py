"""Hypothesis profiles for the fuzz suite, chosen with ``HYPOTHESIS_PROFILE``.

* ``ci`` (the default): the whole fuzz suite in about a minute on a small CI machine;
* ``long``: about twenty-five times as many examples, for a developer's machine
  (``HYPOTHESIS_PROFILE=long pytest tests/fuzz``);
* ``replay``: only the explicit examples and the failures saved in ``.hypothesis/``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
#: The most one fuzz test may take, shrinking included (each call has its own, far shorter, deadline).
TIMEOUT_SECONDS = {"ci": 300, "replay": 300}.get(PROFILE, 3600)

_COMMON = {
    "deadline": None,  # per-call deadlines are the tests' own (see asgi_driver)
    # A fixture such as ``node`` is shared by a test's examples on purpose:
    # each example asks it for a fresh broker.
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                              HealthCheck.data_too_large],
    "print_blob": True,
}
# ci stops at the first distinct failure it has shrunk: on a broken build,
# shrinking every other failure too can take minutes.
settings.register_profile("ci", max_examples=60, stateful_step_count=30, report_multiple_bugs=False, **_COMMON)
settings.register_profile("long", max_examples=1500, stateful_step_count=80, **_COMMON)
# Replay the database and the explicit examples only: quick, for checking a fix.
settings.register_profile("replay", max_examples=60, phases=[Phase.explicit, Phase.reuse], **_COMMON)
settings.load_profile(PROFILE)


def scaled(n: int) -> int:
    """``n`` examples under the ci profile, proportionally more under a larger one."""
    return max(1, n * settings.default.max_examples // 60)
