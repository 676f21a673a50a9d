"""What the profile commands show: the progress bar (on stderr: stdout may carry JSON), the
runs a profile skips or has, and what `profile engine` measured."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from planner.cli.common import console, err_console, print_json

if TYPE_CHECKING:
    from rich.progress import Progress

    from planner.app.profile import (
        EngineProfile,
        OnTarget,
        RayEngineProfile,
        RunKey,
        Skipped,
        Step,
    )
    from planner.profiler.hardware import HwRun
    from planner.profiler.hardware import Step as HwStep
    from planner.profiler.hardware_targets import Callbacks, Target
    from planner.schemas.profile import Profile


def progress() -> Progress:
    """The progress bar of the profile commands (on stderr: stdout may carry JSON)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=err_console,
        transient=False,
    )


def show_planned(skipped: list[Skipped], before: list[RunKey]) -> None:
    for key, why in skipped:
        err_console.print(f"[yellow]skip[/] {key[0]}/{key[1]} tp={key[2]}: {why}")
    for key in before:
        err_console.print(f"[dim]already profiled[/] {key[0]}/{key[1]} tp={key[2]}")


@contextmanager
def steps_bar(total: int) -> Iterator[Step]:
    """The progress bar over a profile's steps."""
    with progress() as bar:
        task = bar.add_task("engine", total=total)

        def step(advance: int, what: str | None) -> None:
            if what is None:
                bar.update(task, advance=advance)
            else:
                bar.update(task, advance=advance, description=what)

        yield step


def show_profile(done: EngineProfile, json_out: bool) -> None:
    if json_out:
        print_json(done.to_json())
        return
    for r in done.runs:
        if r.status == "ok":
            console.print(
                f"[green]ok[/] {r.model}/{r.variant} tp={r.tp}: cold start {r.cold_start_s:.1f} s "
                f"(weights {_f(r.weight_load_s)} s, engine init {_f(r.engine_init_s)} s), "
                f"KV {r.kv_capacity_tokens} tokens, {len(r.prefill)} prefill / {len(r.decode)} decode points"
            )
        else:
            console.print(f"[red]failed[/] {r.model}/{r.variant} tp={r.tp}: {r.reason}")
    console.print(f"wrote {done.path}")


def show_ray_profile(done: RayEngineProfile, json_out: bool) -> None:
    if json_out:
        print_json({"written": done.written, "runs": done.runs})
        return
    for r in done.runs:
        console.print(
            f"{r['node']}: {r['model']}/{r['variant']} tp={r['tp']}: {r['status']} {r['reason']}"
        )
    for p in done.written:
        console.print(f"wrote {p}")


def _f(x: float | None) -> str:
    return "?" if x is None else f"{x:.1f}"


@contextmanager
def hardware_bar() -> Iterator[OnTarget]:
    """The progress bar of `profile hardware`: one task per GPU type, advanced by its steps."""
    with progress() as bar:

        def on_target(target: Target) -> Callbacks:
            task = bar.add_task(target.gpu_type, total=None)

            def on_plan(run: HwRun) -> None:
                bar.update(task, total=sum(s.weight for s in run.steps))

            def on_step(step: HwStep) -> None:
                bar.update(
                    task, advance=step.weight, description=f"{target.gpu_type}: {step.label}"
                )

            return on_plan, on_step

        yield on_target


def print_hardware(p: Profile) -> None:
    from rich.table import Table

    t = Table(title=f"{p.node} / {p.gpu_type} ({p.environment.device_name})")
    t.add_column("measurement")
    t.add_column("median", justify="right")
    t.add_column("p90-p10", justify="right")
    hw = p.hardware
    for dtype, s in hw.gemm_tflops.items():
        t.add_row(f"GEMM {dtype}, TFLOP/s", f"{s.median:.3g}", f"{s.spread:.2g}")
    for name in (
        "device_copy_gbps",
        "h2d_pinned_gbps",
        "h2d_pageable_gbps",
        "d2h_pinned_gbps",
        "disk_read_gbps",
        "ram_gbps",
    ):
        s = getattr(hw, name)
        if s is not None:
            t.add_row(
                name.removesuffix("_gbps").replace("_", " ") + ", GB/s",
                f"{s.median:.3g}",
                f"{s.spread:.2g}",
            )
    console.print(t)
    for n in hw.notes:
        console.print(f"[yellow]note:[/] {n}")


def print_calibrations(out: list[dict[str, Any]]) -> None:
    """`profile calibrate`: each profile's calibration, its factors and checks."""
    for item in out:
        c = item["calibration"]
        console.print(f"[bold]{item['profile']}[/] ({c.get('source', '')})")
        for k, v in c.items():
            if k not in ("source", "factors", "checks", "excluded", "notes", "runs", "models"):
                console.print(f"  {k}: {v:.4g}" if isinstance(v, float) else f"  {k}: {v}")
        _print_checks(c)


def _print_checks(c: dict[str, Any]) -> None:
    """A closed-loop calibration's factors, held-out checks, exclusions and notes."""
    for f in c.get("factors", []):
        who = f"{f['model']}: " if f.get("model") else "GPU: "
        unc = f" (x/ {f['uncertainty_x']:.2f})" if f.get("uncertainty_x") else ""
        note = f": {f['note']}" if f.get("note") else ""
        console.print(
            f"  {who}{f['name']} x{f['factor']:.3g}{unc} {f['status']}{note}", markup=False
        )
    for k in c.get("checks", []):
        who = f"{k['model']}: " if k.get("model") else "GPU: "
        console.print(
            f"  {who}{k['split']} ({k['folds']} folds): held-out TTFT "
            f"{k['prior_ttft_rel']:.1%} -> {k['fitted_ttft_rel']:.1%}, TPOT "
            f"{k['prior_tpot_rel']:.1%} -> {k['fitted_tpot_rel']:.1%} (prior -> calibrated)",
            markup=False,
        )
    for e in c.get("excluded", []):
        console.print(f"  [yellow]left out:[/] {e}")
    for n in c.get("notes", []):
        console.print(f"  [yellow]note:[/] {n}")
    for r in c.get("runs", []):
        console.print(f"  run: {r}", markup=False)
