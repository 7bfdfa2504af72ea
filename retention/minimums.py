"""The applier's own check of a policy truncation against the stored policy's minimum (pure): a stolen
retention-job key can then truncate no more than the policy already allows.

The retention job truncates a TIME-limited stream only at or before a cut recorded at least the time
minimum ago (its min cut, or a subscribers' bound before it), and a SIZE-limited one only where at least
the size minimum stays. The applier checks the same from what its own controller knows: the cuts its
recorder took (with their times) and the stream's sizes now. Sizes only grow and time only passes, so a
truncation the job rightly decided still passes when it reaches the applier.
"""

from __future__ import annotations

from reclaim.retention.cuts import is_at_or_after, size_till
from reclaim.retention.policy import limits_of
from reclaim.retention.topology import Topology
from reclaim.schemas.streams import LimitType, RetentionPolicy, StreamCut, StreamCutRecord


def inside_minimum(policy: RetentionPolicy, cut: StreamCut, topology: Topology, size_now: int,
                   floor: StreamCutRecord | None, time_floor_ms: int) -> str | None:
    """Why truncating at ``cut`` would remove data the policy's minimum keeps; None when it would not.

    ``size_now`` is the stream's size (bytes written since it began); ``floor`` the newest cut recorded at
    or before ``time_floor_ms`` (now less the time minimum), None when none was.
    """
    limits = limits_of(policy)
    if limits is None or policy.min_limit <= 0:
        return None
    if limits.kind is LimitType.SIZE:
        kept = size_now - size_till(topology, cut)
        if kept < policy.min_limit:
            return f"it would keep {kept} bytes, below the policy's size minimum of {policy.min_limit}"
        return None
    if floor is None:
        return (f"no cut was recorded at least {policy.min_limit} ms ago (the policy's time minimum): every byte "
                f"of the stream may be younger")
    if not is_at_or_after(topology, floor.cut, cut):
        return (f"it is past the cut recorded at {floor.recording_time} ms, the newest at least the policy's time "
                f"minimum of {policy.min_limit} ms old")
    return None
