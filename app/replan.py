"""The nightly re-plan (`planner adjust --replan`, the nightly line of `--print-cron`): the
plan optimized again, through the one optimize pipeline and with the config the plan records,
on the last days of the gateway's request log, and written over the plan file (the old one
kept as `<plan>.prev.yaml`) so that its front contains the point in force: that point is
kept (under its name, or `in-force` where a new point took it; its instances unchanged) and
is selected (or the new point with the same instances), so the morning needs no
restart; the next hourly `adjust` walks the new points from it, a hop at a time, when the
forecast says they meet the targets with less memory."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.app.inputs import PlanInputs
from planner.errors import InputError

if TYPE_CHECKING:
    from planner.adjuster.state import StateStore

DAY_S = 86400.0


def in_force(inp: PlanInputs, store: StateStore) -> str:
    """The point in force for this plan in the state dir: the adjuster's last decision, else
    the point applied from this plan, else the plan's selected one."""
    from planner.adjuster.decisions import DecisionLog
    from planner.io import sha256_file

    sha = sha256_file(inp.plan_path)
    names = {p.name for p in inp.plan.points}
    with DecisionLog(store.dir) as journal:
        st = journal.last_state(sha)
    if st is not None and st.point in names:
        return st.point
    meta = store.meta()
    if meta.get("plan_sha") == sha and meta.get("point") in names:
        return str(meta["point"])
    return inp.plan.selected


def replan(
    inp: PlanInputs, store: StateStore, now_s: float, days: float, workload_file: Path
) -> dict[str, Any]:
    """Re-plan on the last `days` of the request log and write the plan (module docstring);
    what was done, for the report."""
    from planner.adjuster.gateway.requestlog import RequestLogSource
    from planner.app.reoptimize import Reoptimizer
    from planner.planfile import write_plan
    from planner.trace.write import write_trace

    recent = RequestLogSource(store.dir).window(now_s - days * DAY_S, now_s)
    if not len(recent):
        raise InputError(
            f"no request in the last {days:g} days of the request log",
            file=str(store.dir / "requests.sqlite"),
            fix="run the gateway first, or re-plan with `planner optimize`",
        )
    cur = inp.plan.point(in_force(inp, store))
    write_trace(recent, workload_file)
    plan, _ = Reoptimizer(inp, None).plan(recent, inp.plan_path, workload_file)
    same = next((p for p in plan.points if p.instances == cur.instances), None)
    points = plan.points
    if same is None:  # the point in force joins the front (renamed if its name is taken)
        taken = {p.name for p in plan.points}
        keep = cur if cur.name not in taken else cur.model_copy(update={"name": "in-force"})
        points = [keep, *plan.points]
    selected = same.name if same is not None else points[0].name
    search = {**plan.search, "replanned_days": days, "kept_in_force": cur.name}
    plan = plan.model_copy(update={"points": points, "selected": selected, "search": search})
    prev = inp.plan_path.with_name(inp.plan_path.name.removesuffix(".yaml") + ".prev.yaml")
    shutil.copyfile(inp.plan_path, prev)
    write_plan(inp.plan_path, plan, inp.cluster)
    return {
        "plan": str(inp.plan_path),
        "previous": str(prev),
        "requests": len(recent),
        "in_force": cur.name,
        "selected": selected,
        "points": [p.name for p in points],
    }


__all__ = ["in_force", "replan"]
