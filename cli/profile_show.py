"""What the profile commands show: the progress bar (on stderr: stdout may carry JSON), the
runs a profile skips or has, and what `profile engine` measured."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from planner.cli.common import console, err_console, print_json

if TYPE_CHECKING:
    from rich.progress import Progress

    from planner.app.profile import EngineProfile, RayEngineProfile, RunKey, Skipped, Step


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
