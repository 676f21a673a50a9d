"""The gateway's /metrics text against Prometheus's own parser (prometheus-client): every
family the gateway renders (counters, gauges, histograms, the key counters) parses, with
its type, and label values that need escaping (quotes, backslashes, newlines) come back
as they were."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from planner.adjuster.gateway.auth import Auth
from planner.adjuster.gateway.metrics import Metrics
from planner.keys import add_key

ODD = 'm"odd\\name\nline'  # a model name a client could send (cut, never unescaped)


def test_metrics_text_parses_with_prometheus_client(tmp_path):
    m = Metrics()
    for model in ("a", ODD):
        m.requests[(model, 200)] += 3
        m.requests[(model, 503)] += 1
        for v in (0.004, 0.3, 7.0, 400.0):
            m.latency[model].observe(v)
            m.ttft[model].observe(v / 10)
        m.switch_wait[model].observe(2.0)
        m.wakes[model] += 1
        m.substitutions[(model, "b")] += 2
    m.malformed["too_large"] += 1
    kf = tmp_path / "keys.yaml"
    add_key(kf, "alice")
    auth = Auth(b"s" * 32, kf)
    auth.admitted["alice"] += 5
    auth.denied[("", 401)] += 2
    text = (
        m.render(
            lambda: {"planner_gateway_awake_instances": ("Awake instances by model.", {ODD: 1})},
            {
                "planner_gateway_connections_open": ("Client connections open.", 4),
                "planner_gateway_body_budget_refused_total": ("Refused for lack of budget.", 0),
            },
        )
        + auth.render_metrics()
    )
    families = {f.name: f for f in text_string_to_metric_families(text)}
    kinds = {name: f.type for name, f in families.items()}
    assert kinds["planner_gateway_requests"] == "counter"
    assert kinds["planner_gateway_request_latency_seconds"] == "histogram"
    assert kinds["planner_gateway_awake_instances"] == "gauge"
    assert kinds["planner_gateway_connections_open"] == "gauge"
    assert kinds["planner_gateway_auth_denied"] == "counter"
    got = {
        (s.labels.get("model"), s.labels.get("status")): s.value
        for s in families["planner_gateway_requests"].samples
    }
    assert got[(ODD, "200")] == 3 and got[("a", "503")] == 1
    hist = [
        s
        for s in families["planner_gateway_request_latency_seconds"].samples
        if s.labels.get("model") == "a"
    ]
    assert {s.name for s in hist} >= {
        "planner_gateway_request_latency_seconds_bucket",
        "planner_gateway_request_latency_seconds_count",
        "planner_gateway_request_latency_seconds_sum",
    }
    inf = [s.value for s in hist if s.labels.get("le") == "+Inf"]
    assert inf == [4]
