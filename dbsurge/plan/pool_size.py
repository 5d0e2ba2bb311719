"""How the user pool grows during a run (without Locust: the shape and its tests share it)."""

from __future__ import annotations

import math

#: Once running, the pool grows only when the plan wants this much more than it has, and then by this much
#: more than it wants (`grown_pool`).
GROW_AT = 1.25


def grown_pool(current: int, wanted: int) -> int:
    """The pool's next size: never smaller; grown only past `GROW_AT` times the current size, then with
    `GROW_AT` of headroom.

    A user that starts mid-run connects (and prepares its statements) on the load host while the plan runs:
    growing one user a tick as the measured service time crept up ("updating to 4 ... 5 ... 6 users" in a
    stage that began at 4) made a pause per new user, stalls of the loop that showed as lag at a stage's
    start. A pool sized before time zero (`current` 0) takes what is wanted.
    """
    if current <= 0:
        return wanted
    if wanted <= current * GROW_AT:
        return current
    return math.ceil(wanted * GROW_AT)
