"""Laxity of one request (FREESH Eq. 6): how much longer it can wait and still meet its deadline.

FREESH §3.3 writes, for request i at time t::

    ℓ_i(t) = (t_arr,i + W_i) − t − T_remain,i

``t_arr + W_i`` is the request's deadline (the classifier stamps it on every
``ClassifiedRequest`` as ``deadline_s``). The scheduler ranks its queue by this number
(:mod:`services.scheduler.laxity` builds W_i and T_remain from profiled TTFT and TBT), the
router admits a candidate at once when it is nearly spent
(:mod:`services.router.placement_step`), and the emergency ladder calls a request at risk
when it falls below a threshold. One definition here keeps "late" meaning the same thing
in all three, and in the simulator, which runs the same steps.
"""

from __future__ import annotations

__all__ = ["laxity_s"]


def laxity_s(deadline_s: float, remaining_s: float, now_s: float) -> float:
    """Return ℓ(t) = deadline − t − T_remain (FREESH Eq. 6); negative means already late.

    Args:
        deadline_s: t_arr + W_i, the absolute deadline.
        remaining_s: T_remain, the predicted processing time the request still needs.
        now_s: t, on the same clock as the deadline.
    """
    return deadline_s - now_s - remaining_s
