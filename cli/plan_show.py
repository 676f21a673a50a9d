"""What `planner plan show` prints: the memory per GPU of a plan point, its predicted
figures, which a calibration moved, and the ladder of points seen from it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.cli.common import console

if TYPE_CHECKING:
    from rich.table import Table

    from planner.app.plan_show import PlanView
    from planner.schemas.plan import Plan, Point


def print_point(view: PlanView) -> None:
    from planner.cli.tables import Col, fit_table, fmt_attainment, fmt_num
    from planner.optimizer.daymemory import hours_text, idle_sleep_rule

    plan = view.plan
    point = view.point
    gpus = view.gpus
    hour = view.hour
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
        used = r.weights_gib + r.kv_gib + r.other_gib + r.sleeping_gib
        cap = r.capacity_gib
        who = ", ".join(
            f"{i.id} ({i.tier}{', tp' + str(i.tp) if i.tp > 1 else ''}"
            f"{', ' + hours_text(i.awake_hours) if i.awake_hours else ''}"
            f"{', asleep' if hour is not None and i.id not in (r.awake_at_hour or []) else ''})"
            for i in r.instances
        )
        rows.append(
            (
                [
                    r.node,
                    str(r.gpu),
                    r.gpu_type or "-",
                    fmt_num(r.weights_gib),
                    fmt_num(r.kv_gib),
                    fmt_num(r.other_gib),
                    fmt_num(r.sleeping_gib),
                    f"{fmt_num(used)}/{fmt_num(cap)}" if cap else fmt_num(used),
                    f"{fmt_num(r.peak_gib)} @{hours_text(r.peak_hours)}",
                    *([fmt_num(r.at_hour_gib)] if hour is not None else []),
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
    for key, figs in view.calibration.items():
        fitted = [f for f, v in figs.items() if v["calibrated"]]
        src = next((v["source"] for v in figs.values() if v["calibrated"]), "")
        text = f"{', '.join(fitted)} ({src})" if fitted else "none (the GPU's defaults)"
        console.print(f"calibrated on {key}: {text}", highlight=False, markup=False)
    others = [p.name for p in plan.points if p.name != point.name]
    if others:
        console.print(f"other points: {', '.join(others)} (--point NAME)", highlight=False)


def print_ladder(view: PlanView) -> None:
    """The ladder as seen from `point`: `ladder_rows` as a table."""
    from planner.cli.tables import Col, fit_table, fmt_attainment, fmt_num

    point, rows = view.point, view.ladder
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
        h = r.hop
        if h is None:
            how = "(this point)"
        elif h.restarts == 0 and h.wakes + h.sleeps == 0:
            how = "rung: other awake hours or idle sleep only"
        elif h.restarts == 0:
            how = f"rung: {h.wakes} wake(s), {h.sleeps} sleep(s), {fmt_num(h.cost_s)} s"
        else:
            how = (
                f"{h.restarts} restart(s), {fmt_num(h.restart_s)} s, "
                f"{fmt_num(h.moved_gib)} GiB loaded"
            )
        name = r.point + (" *" if r.selected else "")
        if r.for_traffic_share:  # its figures are at that share of the traffic
            name += f" (at {r.for_traffic_share:.0%} traffic)"
        out.append(
            (
                [
                    name,
                    f"{r.warm_gpu_gib:.1f}",
                    fmt_num(r.switch_p95_s),
                    fmt_attainment(r.slo_attainment),
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


def predicted_table(plan: Plan, point: Point) -> Table:
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
        if pr is None:  # a plan written before the fitted days' figures were recorded
            continue
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
