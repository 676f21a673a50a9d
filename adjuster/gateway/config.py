"""The gateway's knobs (defaults suit a small team's cluster)."""

from __future__ import annotations

from dataclasses import dataclass

from planner.optimizer import admission, swap


@dataclass
class GatewayConfig:
    """Knobs of the gateway (defaults suit a small team's cluster)."""

    queue_limit: int = admission.QUEUE_LIMIT  # of one model waiting (wake or slot); next: 503
    admit_factor: float = admission.ADMIT_FACTOR  # awake instance: max_num_seqs x this at once
    retries: int = 2  # tries again on another (or restarted) instance, nothing sent yet
    wake_timeout_s: float = 900.0  # longest a wake (start on the CPU build) may take
    drain_timeout_s: float = 60.0  # a co-tenant's in-flight requests finish (or time out)
    min_awake_s: float = swap.MIN_AWAKE_S  # a woken model keeps its memory this long...
    swap_max_wait_s: float = swap.MAX_WAIT_S  # ...unless a request waited this (or its SLO)
    wake_notice_s: float = 2.0  # a streaming client waiting for a wake hears this often
    health_interval_s: float = 5.0  # probe period of instances that should be awake
    health_timeout_s: float = 5.0  # one /health probe; 3 timeouts in a row count as dead
    backoff_base_s: float = 1.0  # first restart delay after a death
    backoff_cap_s: float = 60.0  # restart delays double up to this
    request_timeout_s: float = 900.0  # one proxied request, end to end
    retry_after_s: float = 10.0  # Retry-After before any wake of that model was timed
    log_flush_s: float = 0.5  # request-log batch period
    control_threads: int = 4  # threads running InstanceControl calls
    adopt_every: int = 2  # every this many health rounds, follow apply (point, instances)
    tier_interval_s: float = 10.0  # how often the point's awake hours and idle sleeps apply
    wake_check_timeout_s: float = 120.0  # the one-token check after a wake
    # clients (guard.py; nginx's defaults)
    header_timeout_s: float = 60.0  # a request's headers arrive within this
    body_timeout_s: float = 60.0  # longest pause between two reads of a body
    keepalive_timeout_s: float = 75.0  # an idle kept-alive connection closes
    shutdown_timeout_s: float = 60.0  # at stop, requests in flight finish within this
    max_connections: int = 4096  # open at once (also bounded by the open-file limit)
    max_body_bytes: int = 16 * 1024 * 1024  # larger bodies get 413
    # request bodies held at once (h1body.Budget), in all and per key; beyond: 503
    body_budget_bytes: int = 64 * 1024 * 1024
    body_budget_per_key_bytes: int = 32 * 1024 * 1024
    warn_every_s: float = 60.0  # a recurring error (log write, accept) is logged this often
    # request log (requestlog.py)
    log_max_pending: int = 100_000  # rows kept while the log cannot be written
    log_max_age_s: float = 90 * 86400.0  # rows this much older than the newest are deleted
    log_max_bytes: int = 1 << 30  # the oldest rows go beyond this much data
