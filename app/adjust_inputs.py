"""What `planner adjust` reads and writes around `adjuster.live.tick`: the plan's inputs, the
live tick's settings, and the files a re-optimization or a suggestion leaves behind."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import InputError

if TYPE_CHECKING:
    from planner.adjuster.live import TickConfig
    from planner.adjuster.policy_types import AdjustConfig
    from planner.app.inputs import PlanInputs

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


def policy_config(
    window: str,
    reoptimize: str,
    min_dwell: str | None,
    margin: float | None,
    confirm: int | None,
    items: list[str],
) -> AdjustConfig:
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
                path="--policy",
                fix="use one of: " + ", ".join(sorted(fields)),
            )
        kw[key] = value
    try:
        return AdjustConfig(**kw)
    except ValueError as e:
        raise InputError(str(e).splitlines()[-1], path="--policy / --window") from None


def load(
    plan_path: Path, cluster: Path | None, models: Path | None, slo: Path | None
) -> PlanInputs:
    """The plan and the cluster, models, SLO and calibration it records (or the flags):
    `planner.app.inputs.resolve`, as every plan-reading command."""
    from planner.app.inputs import resolve

    return resolve(plan_path, cluster=cluster, models=models, slo=slo, need_slo=True)


def tick_config(
    inp: PlanInputs, policy: AdjustConfig, *, state_dir: Path, dry_run: bool, timeout_s: float
) -> TickConfig:
    """The live tick's settings: apply as `planner apply` does; a suggestion or a
    re-optimization (`planner.app.reoptimize.Reoptimizer`, with the plan's calibration)
    writes the window next to the state and the new plan next to the plan."""
    from planner.adjuster.backends import gpu_capacity
    from planner.adjuster.launch import model_path_resolver
    from planner.adjuster.live import TickConfig
    from planner.app.reoptimize import Reoptimizer
    from planner.io import sha256_file
    from planner.trace.write import write_trace

    window_file = state_dir / "adjust-window.csv"
    reopt = Reoptimizer(inp, policy.reoptimize_evals, window_file=window_file)
    args = [
        "planner",
        "optimize",
        "--cluster",
        str(inp.cluster_path),
        "--models",
        str(inp.models_path),
        "--slo",
        str(inp.slo_path),
        "--workload",
        str(window_file),
        "-o",
        str(reopt.new_plan),
        "--seed",
        str(inp.seed()),
        "--evals",
        str(policy.reoptimize_evals),
        *(("--profiles", str(inp.profiles_path)) if inp.profiles_path else ()),
    ]
    return TickConfig(
        policy=policy,
        slo=inp.needed_slo(),
        perfs=inp.all_perfs(),
        plan_sha=sha256_file(inp.plan_path),
        plan_path=str(Path(inp.plan_path).resolve()),
        dry_run=dry_run,
        apply_timeout_s=timeout_s,
        model_path_resolver=model_path_resolver(inp.models, inp.models_path.parent),
        gpu_capacity_gib=gpu_capacity(inp.cluster),
        suggest_command=shlex.join(args),
        on_suggest=lambda win: write_trace(win, window_file),
        reoptimize=reopt,
    )


def follow_point_in_force(inp: Any, meta: dict[str, str], state_dir: Path) -> tuple[Any, str]:
    """The inputs of the plan whose point is in force in the state dir, and a note saying so
    when that is another plan file than `inp`'s (`planner apply other.yaml` since adjust
    started, or since the cron line was written): adjust follows the one desired state, it
    never hops the old plan's points over that apply. `inp` and "" when the plan in force is
    `inp`'s (or none is recorded). InputError, naming both files, when the plan in force is
    no longer where it was applied from."""
    from planner.app.apply_checks import placed

    theirs, ours = meta.get("plan_path", ""), str(Path(inp.plan_path).resolve())
    if not meta.get("plan_sha") or not theirs or theirs == ours:
        return inp, ""
    point = meta.get("point", "")
    if not Path(theirs).is_file():
        raise InputError(
            f"the point in force ({point}) was applied from {theirs}, which is gone; "
            f"adjust will not hop {ours} over it",
            file=theirs,
            path="--plan",
            fix=f"apply the plan to adjust first (planner apply {ours}), or restore {theirs}",
        )
    new = load(Path(theirs), None, None, None)
    # a hop starts servers where that apply put this state dir's (its --port-base)
    new.plan, _ = placed(new.plan, new.cluster, None, state_dir, theirs)
    return (
        new,
        f"plan changed: following the point in force of {theirs} (point {point}; not {ours})",
    )


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
    # Not root: the user who owns the state dir (this one), and its secrets (HF_TOKEN, ...)
    # from a 0600 file beside the state, never in the unit (units are world-readable).
    import getpass
    import grp
    import os

    env = q(str(sdir / "planner.env"))
    keep = (
        f"User={getpass.getuser()}\nGroup={grp.getgrgid(os.getgid()).gr_name}\n"
        f"EnvironmentFile=-{env}\nKillMode=process\n"
    )
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
    replan = f"{exe} adjust --plan {plan} --state-dir {state} --replan --replan-days 1"
    text = (
        "# crontab -e: decide five minutes past every hour (the state lease keeps it off a "
        f"running apply)\n5 * * * * {cmd} >> {log} 2>&1\n"
        "# and re-plan at night on the last day of the request log (the point in force stays "
        f"selected: no restart in the morning)\n30 2 * * * {replan} >> {log} 2>&1\n"
        f"\n# the units run as {getpass.getuser()} (the state dir's owner), not root; their "
        f"environment (HF_TOKEN=..., HF_HOME=...) goes in {env}:\n"
        f"#   install -m 600 /dev/null {env}\n"
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
