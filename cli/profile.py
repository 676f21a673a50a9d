"""`planner profile hardware|engine|merge|calibrate|check`: measure, store, fit and check profiles."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import JsonOpt, console, err_console, print_json
from planner.cli.profile_engine import NodeOpt, OutOpt, engine_cmd
from planner.cli.profile_import import import_cmd
from planner.cli.profile_show import hardware_bar, print_calibrations, print_hardware

profile_app = typer.Typer(
    help="Measure GPUs and engines into profiles/, merge nodes' profiles, calibrate the perf model.",
    no_args_is_help=True,
)


@profile_app.command("hardware")
def hardware_cmd(
    device: Annotated[
        str | None,
        typer.Option(
            "--device", help="cuda | cpu; default: cuda when NVML (or nvidia-smi) sees a GPU."
        ),
    ] = None,
    out: OutOpt = Path("profiles"),
    node: NodeOpt = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="Small sizes and few repetitions.")
    ] = False,
    disk_dir: Annotated[
        Path | None,
        typer.Option(
            "--disk-dir", help="Where to write the disk-read test file; default: the output dir."
        ),
    ] = None,
    ray: Annotated[
        bool,
        typer.Option("--ray", help="Run on every node of --cluster through Ray (RAY_ADDRESS)."),
    ] = False,
    cluster_file: Annotated[
        Path | None, typer.Option("--cluster", help="cluster.yaml: the nodes --ray profiles.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Torch microbenchmarks: GEMM TFLOP/s, memory copy, host<->device, disk and RAM GB/s."""
    from planner.app.profile import HardwareHooks, HardwareRequest, profile_hardware

    req = HardwareRequest(device, out, node, quick, disk_dir, ray, cluster_file)
    hooks = HardwareHooks(busy=lambda title: err_console.status(title), measuring=hardware_bar)
    done = profile_hardware(req, hooks)
    profiles = [p for p, _ in done]
    written = [str(path) for _, path in done]
    if json_out:
        print_json(
            {
                "written": written,
                "profiles": [p.model_dump(mode="json", exclude_none=True) for p in profiles],
            }
        )
        return
    for p, path in zip(profiles, written, strict=True):
        print_hardware(p)
        console.print(f"wrote {path}")


@profile_app.command("merge")
def merge_cmd(
    sources: Annotated[
        list[Path], typer.Argument(metavar="PROFILE", help="Profile files or directories.")
    ],
    out: OutOpt = Path("profiles"),
    json_out: JsonOpt = False,
) -> None:
    """Combine nodes' profiles into one directory (one file per node and GPU type)."""
    from planner.app.profile import merge

    paths = [str(p) for p in merge(sources, out)]
    if json_out:
        print_json({"written": paths})
        return
    for p in paths:
        console.print(f"wrote {p}")


profile_app.command("engine")(engine_cmd)  # cli/profile_engine.py
profile_app.command("import")(import_cmd)  # cli/profile_import.py


@profile_app.command("calibrate")
def calibrate_cmd(
    profiles: Annotated[
        list[Path], typer.Argument(metavar="PROFILE", help="Profile files or directories.")
    ],
    json_out: JsonOpt = False,
) -> None:
    """Fit the perf model's efficiency and overhead factors; write them into each profile."""
    from planner.app.profile import calibrate

    done = calibrate(profiles, warn=lambda w: err_console.print(f"[yellow]warning:[/] {w}"))
    out = [
        {"profile": str(path), "calibration": cal.model_dump(exclude_none=True)}
        for path, cal in done
    ]
    if json_out:
        print_json(out)
        return
    print_calibrations(out)


@profile_app.command("check")
def check_cmd(
    profile_dir: Annotated[
        Path,
        typer.Argument(metavar="DIR", help="Profiles of `planner profile hardware --device cuda`."),
    ],
    tests_rc: Annotated[
        int | None, typer.Option("--tests-rc", help="Exit code of the gpu-marked tests.")
    ] = None,
) -> None:
    """Compare measured GPUs with the catalog and the perf model; RESULT line, exit 1 on a miss."""
    from planner.app.profile import check
    from planner.optimizer.hwcheck import result_line

    found, problems = check(profile_dir)
    ok = not problems and tests_rc in (None, 0)
    for name, cs in found:
        console.print(f"{name}:", markup=False, highlight=False)
        for c in cs:
            mark = "ok  " if c.ok else "FAIL"
            console.print(
                f"  {mark} {c.name:20} measured {c.measured:10.3f} {c.unit:8} expected "
                f"{c.expected:10.3f}  ratio {c.ratio:5.2f} in [{c.lo}, {c.hi}]  ({c.note})",
                markup=False,
                highlight=False,
            )
            ok &= c.ok
    for p in problems:
        console.print(f"problem: {p}", markup=False, highlight=False)
    if tests_rc is not None:
        console.print(f"gpu-marked tests: exit code {tests_rc}", highlight=False)
    console.print(result_line(found, ok, tests_rc), markup=False, highlight=False, soft_wrap=True)
    if not ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.add_typer(profile_app, name="profile")
