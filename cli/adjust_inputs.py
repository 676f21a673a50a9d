"""What `planner adjust` reads and writes around `adjuster.live.tick`: the plan's inputs, the
live tick's settings, and the files a re-optimization or a suggestion leaves behind."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import InputError

_UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration_s(text: str, flag: str) -> float:
    """'90s', '30m', '1h', '2d' or plain seconds -> seconds (0 allowed only as '0')."""
    if text.strip() in ("0", "0s"):
        return 0.0
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smhd]?)\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise InputError(
            f"not a duration: {text!r}", path=flag, fix="write e.g. 30m, 1h, 2d or seconds"
        )
    return float(m.group(1)) * _UNITS_S[m.group(2) or "s"]


def policy_config(window, reoptimize, min_dwell, margin, confirm, items: list[str]):
    """AdjustConfig from the flags (exit 2 on a bad value, naming the flag)."""
    from planner.adjuster.policy_types import AdjustConfig

    if reoptimize not in ("auto", "suggest", "never"):
        raise InputError(
            f"unknown mode {reoptimize!r}", path="--reoptimize", fix="use auto, suggest or never"
        )
    kw: dict[str, Any] = {"window_s": duration_s(window, "--window"), "reoptimize": reoptimize}
    if min_dwell is not None:
        kw["min_dwell_s"] = duration_s(min_dwell, "--min-dwell")
    if margin is not None:
        kw["margin"] = margin
    if confirm is not None:
        kw["confirm_windows"] = confirm
    fields = AdjustConfig.model_fields
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or key not in fields:
            raise InputError(
                f"--policy {item!r}: expected KEY=VALUE with KEY one of the policy settings",
                path="--policy", fix="use one of: " + ", ".join(sorted(fields)),
            )  # fmt: skip
        kw[key] = value
    try:
        return AdjustConfig(**kw)
    except ValueError as e:
        raise InputError(str(e).splitlines()[-1], path="--policy / --window") from None


@dataclass
class Inputs:
    """The plan and its inputs, validated (exit 2 on bad files)."""

    plan: Any
    cluster: Any
    models: Any
    slo: Any
    plan_path: Path
    cluster_path: Path
    models_path: Path
    slo_path: Path

    def perfs(self) -> dict[str, dict[str, Any]]:
        """Point name -> instance id -> InstancePerf, from the perf model."""
        from planner.optimizer.sim.perfs import perfs_for_point

        return {p.name: perfs_for_point(p, self.cluster, self.models) for p in self.plan.points}

    def seed(self) -> int:
        return int(self.plan.search.get("seed", 0))


def load(plan_path: Path, cluster: Path | None, models: Path | None, slo: Path | None) -> Inputs:
    """The plan and the cluster, models and SLO files it records (or the flags)."""
    from planner.cli.apply import _input_path, load_plan_inputs
    from planner.schemas import load_slo

    plan_path = Path(plan_path)
    plan, cl, ms, models_file = load_plan_inputs(plan_path, cluster, models)
    cl_path = cluster or _input_path(plan_path, plan.inputs["cluster"].path)
    if cl is None or cl_path is None:
        raise InputError(
            "the cluster file recorded in plan.inputs.cluster is not found", file=str(plan_path),
            path="inputs.cluster.path", fix="pass --cluster CLUSTER.yaml",
        )  # fmt: skip
    sp = slo or _input_path(plan_path, plan.inputs["slo"].path if "slo" in plan.inputs else "")
    if sp is None:
        raise InputError(
            "the SLO file recorded in plan.inputs.slo is not found", file=str(plan_path),
            path="inputs.slo.path", fix="pass --slo SLO.yaml",
        )  # fmt: skip
    return Inputs(plan, cl, ms, load_slo(sp), plan_path, cl_path, models_file, sp)


def _optimize(inp: Inputs, trace, evals: int):
    """`planner optimize` on `trace` in-process (the plan's inputs and seed, `evals` evaluations)."""
    from planner.cli import inputs as cin
    from planner.optimizer.config import OptimizeConfig
    from planner.optimizer.scoring import scorer
    from planner.optimizer.search import optimize

    ocfg = OptimizeConfig(evals=evals, seed=inp.seed())
    cin.silence_solver_banner()
    return ocfg, optimize(inp.cluster, inp.models, inp.slo, trace, ocfg, scorer(trace, inp.slo))


def replay_reoptimizer(inp: Inputs, evals: int):
    """`--reoptimize auto` in a replay: the new points and their perfs."""
    from planner.optimizer.sim.perfs import perfs_for_point

    def reoptimize(window):
        _, res = _optimize(inp, window, evals)
        return res.points, {p.name: perfs_for_point(p, inp.cluster, inp.models) for p in res.points}

    return reoptimize


def tick_config(inp: Inputs, policy: Any, *, state_dir: Path, dry_run: bool, timeout_s: float):
    """The live tick's settings: apply as `planner apply` does; a suggestion or a
    re-optimization writes the window next to the state and the new plan next to the plan."""
    from planner.adjuster.backends import gpu_capacity
    from planner.adjuster.launch import model_path_resolver
    from planner.adjuster.live import TickConfig
    from planner.io import sha256_file
    from planner.trace_write import write_trace

    window_file = state_dir / "adjust-window.csv"
    stem = inp.plan_path.name.removesuffix(".yaml").removesuffix(".plan")
    new_plan = inp.plan_path.with_name(f"{stem}.reoptimized.plan.yaml")
    args = [
        "planner", "optimize", "--cluster", str(inp.cluster_path), "--models",
        str(inp.models_path), "--slo", str(inp.slo_path), "--workload", str(window_file),
        "-o", str(new_plan), "--seed", str(inp.seed()), "--evals", str(policy.reoptimize_evals),
    ]  # fmt: skip

    def reoptimize(recent, now_s: float, plan) -> tuple[None, dict[str, Any]]:
        write_trace(recent, window_file)
        reoptimized_plan(inp, recent, policy.reoptimize_evals, new_plan, window_file)
        return None, {"new_plan": str(new_plan)}

    return TickConfig(
        policy=policy, slo=inp.slo, perfs=inp.perfs(), plan_sha=sha256_file(inp.plan_path),
        dry_run=dry_run, apply_timeout_s=timeout_s,
        model_path_resolver=model_path_resolver(inp.models, inp.models_path.parent),
        gpu_capacity_gib=gpu_capacity(inp.cluster), suggest_command=shlex.join(args),
        on_suggest=lambda win: write_trace(win, window_file), reoptimize=reoptimize,
    )  # fmt: skip


def reoptimized_plan(inp: Inputs, trace, evals: int, out: Path, workload_file: Path) -> Path:
    """Optimize again on `trace` (same inputs and seed, `evals` evaluations); write atomically."""
    from planner.cli import inputs as cin
    from planner.optimizer.evaluation import knobs_to_dict
    from planner.optimizer.workload.characterize import summarize
    from planner.planfile import write_plan
    from planner.schemas.plan import Plan

    ocfg, result = _optimize(inp, trace, evals)
    new = Plan(
        inputs=cin.provenance(
            cluster=inp.cluster_path,
            models=inp.models_path,
            slo=inp.slo_path,
            workload=workload_file,
            base=out.parent,
        ),
        workload_summary=summarize(trace),
        search={
            "seed": inp.seed(),
            "evals": ocfg.evals,
            "solver": ocfg.solver,
            "reoptimized_from": str(inp.plan_path),
            "knobs": {n: knobs_to_dict(k) for n, k in result.knobs.items()},
        },
        selected=result.selected,
        points=result.points,
        hops=result.hops,
    )
    write_plan(out, new, inp.cluster)
    return out


def cron_text(plan_path: Path, state_dir: Path | None, window: str) -> str:
    """A crontab line, and systemd units: the hourly `adjust --once` (service + timer), the
    gateway (long-running, restarted on failure) and the re-apply at boot; and a logrotate
    rule for adjust.log. docs/operations.md explains each."""
    import shlex
    import shutil
    import sys

    from planner.adjuster.state import default_state_dir

    exe = shutil.which("planner") or f"{sys.executable} -m planner.cli.main"
    sdir = (state_dir or default_state_dir()).resolve()
    q = shlex.quote
    plan, state = q(str(plan_path.resolve())), q(str(sdir))
    cmd = f"{exe} adjust --plan {plan} --state-dir {state} --window {q(window)} --once"
    # Engines started by a unit live in its cgroup: KillMode=process keeps them running when
    # a oneshot exits or the gateway restarts (they are tracked in the state dir, and
    # `planner down` stops them).
    keep = "KillMode=process\n"
    units = {
        "planner-adjust.service": "[Unit]\nDescription=planner adjust: hop between Pareto points "
        "when the traffic drifts\nAfter=network-online.target\n\n[Service]\nType=oneshot\n"
        f"{keep}ExecStart={cmd}",
        "planner-adjust.timer": "[Unit]\nDescription=Run planner adjust hourly\n\n[Timer]\n"
        "OnCalendar=*-*-* *:05:00\nPersistent=true\n\n[Install]\nWantedBy=timers.target",
        "planner-apply.service": "[Unit]\nDescription=planner apply at boot: start the point in "
        "force\nWants=network-online.target\nAfter=network-online.target\n\n[Service]\n"
        f"Type=oneshot\nRemainAfterExit=yes\n{keep}TimeoutStartSec=3600\n"
        f"ExecStart={exe} apply {plan} --state-dir {state} --wait-lock 600\n\n"
        "[Install]\nWantedBy=multi-user.target",
        "planner-gateway.service": "[Unit]\nDescription=planner gateway: the OpenAI API that "
        "wakes models on demand\nAfter=network-online.target planner-apply.service\n\n"
        f"[Service]\nType=simple\n{keep}Restart=on-failure\nRestartSec=5\n"
        f"ExecStart={exe} gateway --plan {plan} --state-dir {state} --port 8000\n\n"
        "[Install]\nWantedBy=multi-user.target",
    }
    log = q(str(sdir / "adjust.log"))
    text = (
        "# crontab -e: decide five minutes past every hour (the state lease keeps it off a "
        f"running apply)\n5 * * * * {cmd} >> {log} 2>&1\n"
    )
    for name, body in units.items():
        text += f"\n# /etc/systemd/system/{name}\n{body}\n"
    text += (
        f"\n# /etc/logrotate.d/planner (adjust.log of the crontab line)\n{log} {{\n"
        "    weekly\n    rotate 8\n    compress\n    missingok\n    notifempty\n"
        "    copytruncate\n}\n"
    )
    return text + (
        "# enable with: systemctl daemon-reload && systemctl enable --now planner-adjust.timer "
        "planner-gateway.service && systemctl enable planner-apply.service"
    )
