"""How long the leader has been quiet, and how far this node's clock reads from the leader's.

The document's ``written_at`` is the leader's wall clock; the page's ``taken_at`` is this node's. On a
standby, their difference is the commit's age *plus* the difference between the two clocks, so a standby
whose clock ran a few seconds ahead warned that the leader might be down while it was committing every
heartbeat. A standby's broker also measures the leader's quiet time as a takeover does, on its own
monotonic clock (:meth:`engine.Broker.quiet`): the page shows that, and the difference between the two
measures tells how far the clocks are apart.
"""

from __future__ import annotations

from queueadmin.dashboard.snapshot import Snapshot
from queueadmin.dashboard.source import NodeInfo

#: A standby says its clock and the leader's differ once they surely differ by more than this.
CLOCK_WARN_SECONDS = 2.0


def commit_timing(snapshot: Snapshot, node: NodeInfo) -> tuple[float | None, float | None]:
    """``(quiet, skew)``: seconds since the last commit, and how far this node's clock reads ahead of the
    leader's (negative: behind), None where unknown.

    On the leader, the quiet time is the age of its last commit's ``written_at`` on its own clock, and the
    skew is None. On a standby whose watch has seen the document change, the quiet time is its own measure
    (a takeover's, whatever the clocks say); when the snapshot is the version it saw change to, the skew is
    the wall clocks' age less that measure. The watch sees a change up to ``node.poll_seconds`` late, so
    the skew returned is the true one or up to that much more."""
    written = snapshot.written_at
    age = (snapshot.taken_at - written).total_seconds() if written is not None else None
    if node.role == "leader" or node.quiet is None:
        return age, None
    seq, quiet = node.quiet
    return quiet, (age - quiet if age is not None and seq == snapshot.seq else None)


def clock_warning(skew: float | None, poll_seconds: float) -> str | None:
    """What to tell the operator about a skew from :func:`commit_timing`, when the clocks surely differ by
    more than :data:`CLOCK_WARN_SECONDS`; None otherwise."""
    if skew is None:
        return None
    if skew - poll_seconds > CLOCK_WARN_SECONDS:
        apart = f"at least {skew - poll_seconds:.0f} s ahead of"
    elif skew < -CLOCK_WARN_SECONDS:
        apart = f"at least {-skew:.0f} s behind"
    else:
        return None
    return (f"This node's clock reads {apart} the leader's (the last commit's time against when this node saw "
            "it land). Leases, due times and rate windows are read on the leader's clock, and would be read on "
            "this one if it took over: keep the nodes on NTP.")
