"""Prometheus metrics of the gateway, rendered as text exposition format 0.0.4."""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable

_LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Histogram:
    """Cumulative-on-render latency histogram, s."""

    def __init__(self) -> None:
        self.counts = [0] * len(_LATENCY_BUCKETS_S)
        self.total = 0
        self.sum = 0.0

    def observe(self, v: float) -> None:
        self.total += 1
        self.sum += v
        i = bisect_left(_LATENCY_BUCKETS_S, v)  # the first bucket with v <= le
        if i < len(self.counts):
            self.counts[i] += 1


def _label(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """Counters and histograms the gateway updates; gauges come from `gauges()` at render."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, int], int] = defaultdict(int)
        self.latency: dict[str, Histogram] = defaultdict(Histogram)
        self.ttft: dict[str, Histogram] = defaultdict(Histogram)
        self.switch_wait: dict[str, Histogram] = defaultdict(Histogram)
        self.wakes: dict[str, int] = defaultdict(int)
        self.wake_failures: dict[str, int] = defaultdict(int)
        self.restarts: dict[str, int] = defaultdict(int)
        self.wake_checks: dict[str, int] = defaultdict(int)  # one-token checks after wakes
        self.wake_check_failures: dict[str, int] = defaultdict(int)
        # (model asked for, stand-in that answered) -> requests
        self.substitutions: dict[tuple[str, str], int] = defaultdict(int)
        self.sleeps: dict[str, int] = defaultdict(int)  # instances put to sleep, by model
        self.malformed: dict[str, int] = defaultdict(int)  # 400s before routing, by reason
        self.log_lost = 0  # request-log rows never written (at shutdown)

    def render(
        self,
        gauges: Callable[[], dict[str, tuple[str, dict[str, float]]]],
        totals: dict[str, tuple[str, float]] | None = None,
    ) -> str:
        """The exposition text; `gauges()`: name -> (help, model -> value); `totals`: name ->
        (help, value), unlabelled (a `_total` name is a counter)."""
        out: list[str] = []
        for name, doc, labels, attr in _COUNTERS[:2]:
            _counter(out, name, doc, labels, getattr(self, attr))
        for name, doc, attr in _HISTOGRAMS:
            _histogram(out, name, doc, getattr(self, attr))
        for name, doc, labels, attr in _COUNTERS[2:]:
            _counter(out, name, doc, labels, getattr(self, attr))
        for name, (doc, data) in gauges().items():
            out.append(f"# HELP {name} {doc}\n# TYPE {name} gauge")
            out.extend(f'{name}{{model="{_label(k)}"}} {v}' for k, v in sorted(data.items()))
        for name, (doc, v) in (totals or {}).items():
            kind = "counter" if name.endswith("_total") else "gauge"
            out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n{name} {v}")
        return "\n".join(out) + "\n"


# name, help, label names, Metrics attribute (keys: a label value, or a tuple of them)
_COUNTERS = (
    (
        "planner_gateway_requests_total",
        "Requests by model and HTTP status.",
        ("model", "status"),
        "requests",
    ),
    (
        "planner_gateway_substitutions_total",
        "Requests a stand-in answered, by the model asked for and the stand-in.",
        ("model", "served_by"),
        "substitutions",
    ),
    ("planner_gateway_wakes_total", "Completed wakes by model.", ("model",), "wakes"),
    ("planner_gateway_wake_failures_total", "Failed wakes by model.", ("model",), "wake_failures"),
    ("planner_gateway_sleeps_total", "Instances put to sleep by model.", ("model",), "sleeps"),
    (
        "planner_gateway_malformed_requests_total",
        "Requests refused with 400 before routing, by reason.",
        ("reason",),
        "malformed",
    ),
    # labelled `engine`: Prometheus gives every scraped series an `instance` label (the target)
    ("planner_gateway_restarts_total", "Restarts of instances that died.", ("engine",), "restarts"),
    (
        "planner_gateway_wake_checks_total",
        "One-token checks sent after wakes, by model.",
        ("model",),
        "wake_checks",
    ),
    (
        "planner_gateway_wake_check_failures_total",
        "Wake checks whose answer was wrong (the instance was restarted), by model.",
        ("model",),
        "wake_check_failures",
    ),
)
_HISTOGRAMS = (
    ("planner_gateway_request_latency_seconds", "Arrival to last byte.", "latency"),
    ("planner_gateway_ttft_seconds", "Arrival to first byte from the engine.", "ttft"),
    ("planner_gateway_switch_wait_seconds", "Time requests waited for a wake.", "switch_wait"),
)


def _counter(out: list[str], name: str, doc: str, labels: tuple[str, ...], data: dict) -> None:
    out.append(f"# HELP {name} {doc}\n# TYPE {name} counter")
    for k, v in sorted(data.items()):
        values = k if isinstance(k, tuple) else (k,)
        pairs = ",".join(f'{n}="{_label(str(x))}"' for n, x in zip(labels, values, strict=True))
        out.append(f"{name}{{{pairs}}} {v}")


def _histogram(out: list[str], name: str, doc: str, data: dict[str, Histogram]) -> None:
    out.append(f"# HELP {name} {doc}\n# TYPE {name} histogram")
    for model, h in sorted(data.items()):
        m = _label(model)
        acc = 0
        for le, c in zip(_LATENCY_BUCKETS_S, h.counts, strict=True):
            acc += c
            out.append(f'{name}_bucket{{model="{m}",le="{le}"}} {acc}')
        out.append(f'{name}_bucket{{model="{m}",le="+Inf"}} {h.total}')
        out.append(f'{name}_sum{{model="{m}"}} {h.sum:.6f}')
        out.append(f'{name}_count{{model="{m}"}} {h.total}')
