"""`planner plan show PLAN`: what a plan point puts on each GPU, as a table (or --json)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from planner.cli.common import JsonOpt, PlanArg, PointOpt, console, print_json

plan_app = typer.Typer(help="Read plan files.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add `plan show`."""
    app.add_typer(plan_app, name="plan")


@plan_app.command("show")
def show_cmd(
    plan_path: PlanArg,
    point: PointOpt = None,
    hour: Annotated[
        int | None,
        typer.Option("--hour", min=0, max=23, help="Draw the memory planned at this UTC hour."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Memory per GPU of a plan point: weights, KV cache, sleeping instances, who is there,
    and the memory over the day (peak and when, awake hours, the idle-sleep rule)."""
    from planner.errors import InputError

    plan = _load(plan_path)
    names = [p.name for p in plan.points]
    if point is not None and point not in names:
        raise InputError(
            f"no point {point!r} in the plan",
            file=str(plan_path),
            path="--point",
            fix=f"use one of {names}",
        )
    from planner.optimizer.daymemory import idle_sleep_rule

    p = plan.point(point)
    gpus = gpu_rows(p, _capacities(plan, plan_path), hour)
    if json_out:
        print_json(
            {
                "plan": str(plan_path), "point": p.name, "predicted": p.predicted,
                "predicted_fit": p.predicted_fit, "held_days": plan.search.get("held_days", []),
                "idle_sleep": idle_sleep_rule(p), "hour": hour, "gpus": gpus,
                "ladder": ladder_rows(plan, p),
                "calibration": calibration_sources(plan, p),
            }
        )  # fmt: skip
        return
    _print(plan, p, gpus, hour)
    _print_ladder(plan, p)


def ladder_rows(plan: Any, point: Any) -> list[dict[str, Any]]:
    """Every point of the plan, leanest first, with the hop from `point` to it (the plan's
    `hops`): restarts, their seconds and the GiB they load, wakes and sleeps. `rung`: it
    shares `point`'s placement (the hop restarts nothing: sleeps and wakes only)."""
    hops = plan.hops.get(point.name, {})
    rows = []
    for q in sorted(plan.points, key=lambda q: (q.predicted.warm_gpu_gib, q.name)):
        h = hops.get(q.name)
        rows.append(
            {
                "point": q.name,
                "selected": q.name == plan.selected,
                "warm_gpu_gib": q.predicted.warm_gpu_gib,
                "switch_p95_s": q.predicted.switch_p95_s,
                "slo_attainment": q.predicted.slo_attainment,
                "rung": q.name == point.name or (h is not None and h.restarts == 0),
                "for_traffic_share": q.for_traffic_share,
                "hop": None if h is None else h.model_dump(),
            }
        )
    return rows


def _print_ladder(plan: Any, point: Any) -> None:
    """The ladder as seen from `point`: `ladder_rows` as a table."""
    from planner.cli.tables import Col, fit_table, fmt_attainment, fmt_num

    rows = ladder_rows(plan, point)
    if len(rows) < 2:
        return
    cols = [
        Col("point", "left"),
        Col("warm GiB"),
        Col("switch s"),
        Col("SLO met"),
        Col(f"hop from {point.name}", "left"),
    ]
    out = []
    for r in rows:
        h = r["hop"]
        if h is None:
            how = "(this point)"
        elif h["restarts"] == 0 and h["wakes"] + h["sleeps"] == 0:
            how = "rung: other awake hours or idle sleep only"
        elif h["restarts"] == 0:
            how = f"rung: {h['wakes']} wake(s), {h['sleeps']} sleep(s), {fmt_num(h['cost_s'])} s"
        else:
            how = (
                f"{h['restarts']} restart(s), {fmt_num(h['restart_s'])} s, "
                f"{fmt_num(h['moved_gib'])} GiB loaded"
            )
        name = r["point"] + (" *" if r["selected"] else "")
        if r["for_traffic_share"]:  # its figures are at that share of the traffic
            name += f" (at {r['for_traffic_share']:.0%} traffic)"
        out.append(
            (
                [
                    name,
                    f"{r['warm_gpu_gib']:.1f}",
                    fmt_num(r["switch_p95_s"]),
                    fmt_attainment(r["slo_attainment"]),
                    how,
                ],
                None,
            )
        )
    console.print(
        fit_table(
            f"the ladder from {point.name}",
            cols,
            out,
            caption="points leanest first; rung: shares this point's placement, so a hop to it "
            "only sleeps or wakes instances (the adjuster walks these); a hop with restarts "
            "moves models between GPUs; * the selected point; (at N% traffic): a quiet rung, "
            "its figures on the chosen days thinned to that share, for hours of fallen traffic",
        )
    )


def gpu_rows(
    point: Any, capacity_gib: dict[tuple[str, int], float], hour: int | None = None
) -> list[dict[str, Any]]:
    """One row per GPU the point uses: awake weights / KV / other GiB, the sleeping slot, who,
    and the memory over the day (`optimizer.daymemory`): the peak planned awake and its
    hours, and with `hour` what is planned then.

    The sleeping slot is the largest awake footprint of the `host`/`disk` instances on the GPU:
    what must stay free to wake one of them (the memory invariant of docs/plan-format.md).
    """
    from planner.optimizer.daymemory import day_memory

    days = {(d.node, d.gpu): d for d in day_memory(point)}
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for inst in point.instances:
        for g in inst.gpus:
            r = rows.setdefault(
                (inst.node, g),
                {
                    "node": inst.node,
                    "gpu": g,
                    "gpu_type": inst.gpu_type,
                    "weights_gib": 0.0,
                    "kv_gib": 0.0,
                    "other_gib": 0.0,
                    "sleeping_gib": 0.0,
                    "capacity_gib": capacity_gib.get((inst.node, g)),
                    "instances": [],
                },
            )
            m = inst.memory_gib
            if inst.tier == "gpu":
                r["weights_gib"] += m.weights
                r["kv_gib"] += m.kv
                r["other_gib"] += m.overhead
            else:
                r["sleeping_gib"] = max(r["sleeping_gib"], m.total)
            r["instances"].append(
                {"id": inst.id, "tier": inst.tier, "tp": inst.tp, "awake_hours": inst.awake_hours}
            )
    out = [rows[k] for k in sorted(rows)]
    for r in out:
        for k in ("weights_gib", "kv_gib", "other_gib", "sleeping_gib"):
            r[k] = round(r[k], 3)
        d = days[(r["node"], r["gpu"])]
        r["peak_gib"], r["peak_hours"] = d.peak_gib, d.peak_hours
        r["on_demand_gib"] = d.on_demand_gib
        if hour is not None:
            r["at_hour_gib"], r["awake_at_hour"] = d.by_hour_gib[hour], list(d.awake_by_hour[hour])
    return out


def _load(plan_path: Path):
    """The plan; GPU types filled from the recorded cluster file when the plan predates them."""
    from planner.planfile import annotate
    from planner.schemas import load_cluster, load_plan

    plan = load_plan(plan_path)
    if all(i.gpu_type for p in plan.points for i in p.instances):
        return plan
    cluster_file = _recorded(plan, plan_path, "cluster")
    return annotate(plan, load_cluster(cluster_file)) if cluster_file else plan


def _recorded(plan: Any, plan_path: Path, kind: str) -> Path | None:
    """An input recorded in plan.inputs, found as `planner apply` finds it."""
    from planner.app.inputs import recorded_path
    from planner.errors import InputError

    try:
        return recorded_path(plan_path, plan, kind)
    except InputError:  # `plan show` reads the plan alone when its inputs moved
        return None


def _capacities(plan: Any, plan_path: Path) -> dict[tuple[str, int], float]:
    """(node, device) -> GiB of the GPU, from the recorded cluster file or the GPU catalog."""
    from planner.catalog.gpus import resolve_gpu
    from planner.errors import PlannerError
    from planner.schemas import load_cluster

    cluster_file = _recorded(plan, plan_path, "cluster")
    if cluster_file is not None:
        try:
            cl = load_cluster(cluster_file)
            return {(n.name, i): g.spec.memory_gib for n in cl.nodes for i, g in n.gpu_list()}
        except PlannerError:
            pass  # changed since: fall back to the catalog by type
    out = {}
    for p in plan.points:
        for inst in p.instances:
            try:
                gib = resolve_gpu(inst.gpu_type).memory_gib
            except ValueError:
                continue
            out |= {(inst.node, g): gib for g in inst.gpus}
    return out


def _print(plan: Any, point: Any, gpus: list[dict[str, Any]], hour: int | None) -> None:
    from planner.cli.tables import Col, fit_table, fmt_attainment, fmt_num
    from planner.optimizer.daymemory import hours_text, idle_sleep_rule

    pr = point.predicted
    cols = [
        Col("node", "left"),
        Col("GPU"),
        Col("type", "left"),
        Col("weights", drop=3),
        Col("KV", drop=2),
        Col("other", drop=4),
        Col("sleeping", drop=1),
        Col("used/GiB"),
        Col("peak GiB (UTC)"),
        *([Col(f"at {hour:02d}h")] if hour is not None else []),
        Col("instances (tier, TP, awake hours)", "left"),
    ]
    rows = []
    for r in gpus:
        used = r["weights_gib"] + r["kv_gib"] + r["other_gib"] + r["sleeping_gib"]
        cap = r["capacity_gib"]
        who = ", ".join(
            f"{i['id']} ({i['tier']}{', tp' + str(i['tp']) if i['tp'] > 1 else ''}"
            f"{', ' + hours_text(i['awake_hours']) if i['awake_hours'] else ''}"
            f"{', asleep' if hour is not None and i['id'] not in r['awake_at_hour'] else ''})"
            for i in r["instances"]
        )
        rows.append(
            (
                [
                    r["node"],
                    str(r["gpu"]),
                    r["gpu_type"] or "-",
                    fmt_num(r["weights_gib"]),
                    fmt_num(r["kv_gib"]),
                    fmt_num(r["other_gib"]),
                    fmt_num(r["sleeping_gib"]),
                    f"{fmt_num(used)}/{fmt_num(cap)}" if cap else fmt_num(used),
                    f"{fmt_num(r['peak_gib'])} @{hours_text(r['peak_hours'])}",
                    *([fmt_num(r["at_hour_gib"])] if hour is not None else []),
                    who,
                ],
                None,
            )
        )
    selected = " (selected)" if point.name == plan.selected else ""
    console.print(
        fit_table(
            f"point {point.name}{selected}: {len(point.instances)} instances on {len(gpus)} GPUs",
            cols,
            rows,
            caption="GiB per GPU; weights/KV/other: awake instances; sleeping: kept free to "
            "wake the largest host/disk instance there; peak: memory planned awake over the "
            f"day (awake hours, UTC) and when; {idle_sleep_rule(point)}",
        )
    )
    if point.predicted_fit is None:
        console.print(
            f"predicted: SLO met {fmt_attainment(pr.slo_attainment)}, P95 switch "
            f"{fmt_num(pr.switch_p95_s)} s, TTFT {fmt_num(pr.ttft_p95_s)} s, TPOT "
            f"{fmt_num(1000 * pr.tpot_p95_s)} ms; warm {pr.warm_gpu_gib:.1f} GiB on "
            f"{pr.gpus_used} GPUs",
            highlight=False,
        )
    else:
        console.print(predicted_table(plan, point))
    for key, figs in calibration_sources(plan, point).items():
        fitted = [f for f, v in figs.items() if v["calibrated"]]
        src = next((v["source"] for v in figs.values() if v["calibrated"]), "")
        text = f"{', '.join(fitted)} ({src})" if fitted else "none (the GPU's defaults)"
        console.print(f"calibrated on {key}: {text}", highlight=False, markup=False)
    others = [p.name for p in plan.points if p.name != point.name]
    if others:
        console.print(f"other points: {', '.join(others)} (--point NAME)", highlight=False)


def calibration_sources(plan: Any, point: Any) -> dict[str, Any]:
    """ "model on GPU type" -> per figure, whether the plan's calibration moved it and from
    which runs (`calib.figure_sources`; the plan records each GPU type's calibration)."""
    from planner.optimizer.perf.calib import figure_sources

    out = {}
    for i in point.instances:
        ref = plan.calibration.get(i.gpu_type)
        key = f"{i.model} on {i.gpu_type}"
        if key not in out:
            out[key] = (
                figure_sources(ref.fields, ref.source, ref.runs, ref.models.get(i.model))
                if ref is not None
                else figure_sources([], "", [], None)
            )
    return out


def predicted_table(plan: Any, point: Any) -> Any:
    """The point's predicted figures on the held-back days beside those on the fitted days,
    each row naming its days and their requests (`search.held_days`, `fit_requests`)."""
    from planner.cli.tables import Col, fit_table, fmt_attainment, fmt_num

    held = plan.search.get("held_days") or []
    rule = plan.search.get("held_back")
    rows = []
    for label, pr in (
        (
            "held back: " + ", ".join(f"day {d['day']} ({d['requests']} requests)" for d in held),
            point.predicted,
        ),
        (
            f"fitted: the other days ({plan.search.get('fit_requests', '?')} requests)",
            point.predicted_fit,
        ),
    ):
        rows.append(
            (
                [
                    label,
                    fmt_attainment(pr.slo_attainment),
                    fmt_num(pr.switch_p95_s),
                    fmt_num(pr.ttft_p95_s),
                    fmt_num(1000 * pr.tpot_p95_s),
                    f"{pr.warm_gpu_gib:.1f}",
                    str(pr.gpus_used),
                ],
                None,
            )
        )
    cols = [
        Col("days (from 0)", "left"),
        Col("SLO met"),
        Col("switch P95 s"),
        Col("TTFT P95 s", drop=2),
        Col("TPOT P95 ms", drop=1),
        Col("warm GiB"),
        Col("GPUs", drop=3),
    ]
    why = f" (--held-back {rule})" if rule else ""
    return fit_table(
        "predicted: on the held-back days the points were chosen on"
        + why
        + ", beside the fitted days",
        cols,
        rows,
    )
