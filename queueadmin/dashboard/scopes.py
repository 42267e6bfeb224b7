"""Queue scopes: which queues a user's operator actions may touch.

A :class:`~queueadmin.models.QueueScope` row gives a user, or every member
of a group, a shell-style pattern of queue names. The rule:

* a superuser acts on every queue;
* a user with no scope, of their own or through their groups, acts on every
  queue (a deployment that never made a scope behaves as before);
* any other user acts only on queues one of their patterns matches.

Scopes narrow what permissions allow; they never grant an action. Every
action that names queues checks them at its dry run and again at its run
(a scope may have been narrowed in between): a requeue, purge or redrive by
the queues of its jobs, a pause, limit or rate by its queue, a schedule's
action by the queue it pushes to, a push from the Submit page by its queue.
Database I/O (one query); no broker I/O.

A scope with ``hide_others`` also hides every queue outside the user's
patterns from them (:func:`visibility`): the pages are drawn from the
document as if those queues did not exist (``Snapshot.visible``), and their
audit entries, schedules and finished jobs are left out.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from fnmatch import fnmatchcase
from typing import Any

from django.db.models import Q

__all__ = ["OutOfScope", "allows", "check", "patterns", "refusal", "visibility"]


class OutOfScope(Exception):
    """An action touches a queue outside the user's queue scopes; the
    message says which (see :func:`refusal`). Nothing was changed."""


def _scopes(user: Any, *, cached: bool) -> list[tuple[str, bool]]:
    """``user``'s scopes as (pattern, hide_others), their own and their
    groups'; none for a superuser or an anonymous user. One query, kept on
    the user object for the next ``cached`` call (a request's user lives for
    the request, a live socket's until its next recheck)."""
    from queueadmin.models import QueueScope  # models load after the app registry

    if cached and hasattr(user, "_queue_scopes"):
        kept: list[tuple[str, bool]] = user._queue_scopes
        return kept
    rows: list[tuple[str, bool]] = []
    if user.is_authenticated and not user.is_superuser:
        rows = list(QueueScope.objects.filter(Q(user=user) | Q(group__in=user.groups.all()))
                    .values_list("pattern", "hide_others"))
    user._queue_scopes = rows
    return rows


def patterns(user: Any, *, cached: bool = False) -> list[str] | None:
    """The patterns of the queues ``user`` may act on; None for every queue.
    Read afresh unless ``cached`` (what a page shows may reuse the request's
    read; an action's check does not)."""
    return sorted({pattern for pattern, _ in _scopes(user, cached=cached)}) or None


def visibility(user: Any) -> Callable[[str], bool] | None:
    """What ``user`` may see of the queues: None for every queue (a
    superuser, or no scope of theirs hides the others), else whether a queue
    name is one their patterns match. Shares :func:`patterns`' one query per
    user object, and returns the same function for the same object."""
    if hasattr(user, "_queue_visibility"):
        seen: Callable[[str], bool] | None = user._queue_visibility
        return seen
    rows = _scopes(user, cached=True)
    seen = functools.partial(allows, patterns(user, cached=True)) if any(hide for _, hide in rows) else None
    user._queue_visibility = seen
    return seen


def allows(scope: list[str] | None, queue: str) -> bool:
    """Whether a user with ``scope`` (see :func:`patterns`) may act on ``queue``.
    Case-sensitive, as queue names are."""
    return scope is None or any(fnmatchcase(queue, pattern) for pattern in scope)


def refusal(user: Any, queues: Iterable[str]) -> str | None:
    """Why ``user`` may not act on ``queues``, or None when every one is in
    their scope. The message names the queues out of scope and the patterns."""
    scope = patterns(user)
    outside = sorted({q for q in queues if not allows(scope, q)})
    if not outside:
        return None
    assert scope is not None
    named = [q or "no queue (a schedule this node does not define)" for q in outside]
    return (f"Your account acts only on queues matching {', '.join(scope)}; this action touches "
            f"{', '.join(named)}, so it is refused and nothing was changed. Ask an administrator for a queue "
            "scope that covers it.")


def check(user: Any, queues: Iterable[str]) -> None:
    """Raise :class:`OutOfScope` unless every one of ``queues`` is in ``user``'s scopes."""
    why = refusal(user, queues)
    if why is not None:
        raise OutOfScope(why)
