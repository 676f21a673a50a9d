"""How `planner adjust` shows a live tick (cli/adjust.py parses, this prints)."""

from __future__ import annotations

from planner.cli.common import console, print_error, print_json


def show_tick(res, dry_run: bool, json_out: bool, state_dir: str) -> None:
    """One tick's result: JSON, or the decision, the points on the window and what was done."""
    out = {**res.to_json(), "dry_run": dry_run, "state_dir": state_dir}
    if json_out:
        print_json(out)
        return
    d = out["decision"]
    tag = " (dry run)" if dry_run else ""
    console.print(
        f"window: {out['window']['requests']} requests; decision{tag}: [bold]{d['kind']}[/] "
        f"{d['from']} -> {d['point']}: {d['reason']}",
        highlight=False,
    )
    from rich.table import Table

    t = Table(title="points on the window")
    for c in ("point", "SLO met", "switch P95 s", "warm GiB", "objective s", "meets", "hop"):
        t.add_column(c)
    for name, m in d["reasons"].get("points", {}).items():
        hc = m.get("hop_cost") or {}
        hop = "-" if not hc.get("duration_s") else (
            f"{hc['starts']} start(s), {hc['wakes']} wake(s), {hc['duration_s']:.0f} s"
        )  # fmt: skip
        t.add_row(
            name, f"{m['slo_attainment']:.1%}", f"{m['switch_p95_s']:.2f}",
            f"{m['warm_gpu_gib']:.1f}", f"{m['objective_s']:.2f}", "yes" if m["meets_slo"] else "no",
            hop,
        )  # fmt: skip
    console.print(t)
    for key in ("drift_plan", "drift_chosen"):
        rep = d["reasons"].get(key)
        if rep:
            console.print(f"{key}: {rep['verdict']} {', '.join(rep['fired'])}", highlight=False)
    if d["kind"] == "suggest":
        console.print(f"run: {d['command']}", highlight=False, soft_wrap=True)
    if out.get("new_plan"):
        console.print(
            f"wrote {out['new_plan']}; apply it with `planner apply {out['new_plan']}`",
            highlight=False,
        )
    if out.get("error"):
        print_error(str(out["error"]))
