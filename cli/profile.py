"""`planner profile hardware|engine|merge|calibrate|check`: measure, store, fit and check profiles."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import JsonOpt, console, err_console, print_json, require_extra
from planner.cli.profile_engine import NodeOpt, OutOpt, engine_cmd, progress
from planner.cli.profile_import import import_cmd
from planner.errors import InputError

profile_app = typer.Typer(
    help="Measure GPUs and engines into profiles/, merge nodes' profiles, calibrate the perf model.",
    no_args_is_help=True,
)


def _default_device() -> str:
    from planner.gpu_discovery import discover_gpus

    return "cuda" if discover_gpus().gpus else "cpu"


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
    from planner.profiler import store
    from planner.profiler.hardware_targets import profile_hardware

    dev = device or _default_device()
    if dev not in ("cuda", "cpu"):
        raise InputError(f"unknown device {dev!r}", path="--device", fix="use cuda or cpu")
    if ray:
        require_extra("cluster", "`planner profile hardware --ray`")
        from planner.profiler.remote import cluster_nodes, hardware_on_nodes

        nodes = cluster_nodes(cluster_file, node)
        with err_console.status(f"profiling hardware on {len(nodes)} node(s) through Ray ..."):
            measured = hardware_on_nodes(nodes, dev, quick=quick)
    else:
        require_extra("profile", "`planner profile hardware`")
        with progress() as bar:

            def on_target(target):
                task = bar.add_task(target.gpu_type, total=None)

                def on_plan(run):
                    bar.update(task, total=sum(s.weight for s in run.steps))

                def on_step(step):
                    bar.update(
                        task, advance=step.weight, description=f"{target.gpu_type}: {step.label}"
                    )

                return on_plan, on_step

            measured = profile_hardware(
                dev,
                node or platform.node(),
                quick=quick,
                disk_dir=disk_dir or out,
                on_target=on_target,
            )
    written: list[str] = []
    profiles = []
    for m in measured:
        prof = store.load_or_new(out, m.node, m.gpu_type)  # keeps the file's engine runs
        prof.hardware, prof.environment = m.hardware, m.environment
        written.append(str(store.save(prof, store.profile_path(out, m.node, m.gpu_type))))
        profiles.append(prof)
    if json_out:
        print_json(
            {
                "written": written,
                "profiles": [p.model_dump(mode="json", exclude_none=True) for p in profiles],
            }
        )
        return
    for p, path in zip(profiles, written, strict=True):
        _print_hardware(p)
        console.print(f"wrote {path}")


def _print_hardware(p) -> None:
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


@profile_app.command("merge")
def merge_cmd(
    sources: Annotated[
        list[Path], typer.Argument(metavar="PROFILE", help="Profile files or directories.")
    ],
    out: OutOpt = Path("profiles"),
    json_out: JsonOpt = False,
) -> None:
    """Combine nodes' profiles into one directory (one file per node and GPU type)."""
    from planner.profiler import store

    merged = store.merge(store.load_profiles(list(sources)))
    paths = [str(store.save(p, store.profile_path(out, p.node, p.gpu_type))) for p in merged]
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
    from planner.catalog.gpus import resolve_gpu
    from planner.optimizer.perf.calib import default_calib
    from planner.optimizer.perf.calibration import calibrate
    from planner.profiler import store
    from planner.schemas import load_profile

    out = []
    for path in store.profile_files(list(profiles)):
        prof = load_profile(path)
        try:
            gpu = resolve_gpu(prof.gpu_type)
        except ValueError as e:
            raise InputError(
                str(e),
                file=str(path),
                path="gpu_type",
                fix="profile a catalog GPU type, or add the type to the catalog",
            ) from None
        for w in store.warnings_here([prof]):
            err_console.print(f"[yellow]warning:[/] {w}")
        cal = calibrate(prof, gpu, default_calib(gpu.arch))
        if not cal.points and (prof.engine or cal.source == "defaults"):
            raise InputError(
                "no usable point to calibrate from"
                + "".join(f"\n  {e}" for e in cal.excluded or ["(no engine runs)"]),
                file=str(path),
                fix="import runs of a catalog model that fits this GPU (`planner profile "
                "import FILE --gpu TYPE --model NAME`), or run `planner profile engine`",
            )
        prof.calibration = cal
        store.save(prof, path)
        out.append(
            {"profile": str(path), "calibration": prof.calibration.model_dump(exclude_none=True)}
        )
    if json_out:
        print_json(out)
        return
    for item in out:
        c = item["calibration"]
        console.print(f"[bold]{item['profile']}[/] ({c.get('source', '')})")
        for k, v in c.items():
            if k not in ("source", "factors", "checks", "excluded", "notes", "runs", "models"):
                console.print(f"  {k}: {v:.4g}" if isinstance(v, float) else f"  {k}: {v}")
        _print_checks(c)


def _print_checks(c: dict) -> None:
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
    from planner.optimizer.hwcheck import check_profiles, result_line
    from planner.profiler import store

    profiles = store.load_profiles(sorted(Path(profile_dir).glob("*.yaml")))
    found, problems = check_profiles(profiles, str(profile_dir))
    ok = not problems and tests_rc in (None, 0)
    for name, cs in found:
        console.print(f"{name}:", markup=False, highlight=False)
        for c in cs:
            mark = "ok  " if c.ok else "FAIL"
            console.print(
                f"  {mark} {c.name:20} measured {c.measured:10.3f} {c.unit:8} expected "
                f"{c.expected:10.3f}  ratio {c.ratio:5.2f} in [{c.lo}, {c.hi}]  ({c.note})",
                markup=False, highlight=False,
            )  # fmt: skip
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
