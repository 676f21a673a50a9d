"""The one queue model: how many requests of a model the gateway admits, and the simulator
with it (issue 30 item 4).

An awake instance takes at most `instance_limit` requests at once (its `max_num_seqs` times
`ADMIT_FACTOR`: the engine's batch full plus a short queue inside the engine). Beyond that,
at most `QUEUE_LIMIT` requests of the model wait in the gateway (for a slot or a wake); the
next one is refused (503 with Retry-After), a miss by reason `REFUSED_QUEUE_FULL`. While no
instance of the model is awake, only the queue holds its requests.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

ADMIT_FACTOR = 2.0  # an awake instance takes max_num_seqs x this at once (> 0)
QUEUE_LIMIT = 64  # requests of one model waiting in the gateway (wake or slot)
REFUSED_QUEUE_FULL = "refused_queue_full"  # the reason a refused request is counted under


def instance_limit(max_num_seqs: int, admit_factor: float = ADMIT_FACTOR) -> int:
    """Requests one awake instance takes at once."""
    return max(1, math.ceil(max_num_seqs * admit_factor))


def model_bound(awake_limits: Iterable[int], queue_limit: int = QUEUE_LIMIT) -> int:
    """Requests of one model the gateway holds at once: its awake instances' limits + queue."""
    return sum(awake_limits) + queue_limit


__all__ = [
    "ADMIT_FACTOR",
    "QUEUE_LIMIT",
    "REFUSED_QUEUE_FULL",
    "instance_limit",
    "model_bound",
]
