"""Profiles on disk: one YAML per (node, GPU type) under a directory, written atomically.

`merge` combines the files of several nodes (or several runs of one node): hardware
figures and engine runs of the later file win key by key; a run that succeeded is never
replaced by a failed one.
"""

from __future__ import annotations

import platform
import re
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from planner.engines.kinds import DEFAULT_KIND, engine_kinds
from planner.errors import InputError
from planner.io import atomic_write_text, dump_yaml
from planner.schemas import load_profile
from planner.schemas.profile import EngineRun, Environment, Hardware, Profile


def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", s).strip("-") or "x"


def profile_path(out_dir: str | Path, node: str, gpu_type: str) -> Path:
    """`<out_dir>/<node>-<gpu_type>.yaml` (unsafe characters replaced)."""
    return Path(out_dir) / f"{_safe(node)}-{_safe(gpu_type)}.yaml"


def save(profile: Profile, path: str | Path) -> Path:
    """Write a profile atomically (unset optional figures left out)."""
    data = profile.model_dump(mode="json", exclude_none=True)
    atomic_write_text(path, dump_yaml(data))
    return Path(path)


def load_or_new(out_dir: str | Path, node: str, gpu_type: str) -> Profile:
    """The stored profile of (node, gpu_type), or an empty one."""
    p = profile_path(out_dir, node, gpu_type)
    if p.exists():
        prof = load_profile(p)
        if prof.node != node or prof.gpu_type != gpu_type:
            raise InputError(
                f"holds node {prof.node!r} / {prof.gpu_type!r}, expected {node!r} / {gpu_type!r}",
                file=str(p),
                fix="move the file away or pick another output directory",
            )
        return prof
    return Profile(node=node, gpu_type=gpu_type)


def profile_files(paths: list[str | Path]) -> list[Path]:
    """Every profile YAML named, or inside a named directory (sorted), in argument order."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(q for q in p.iterdir() if q.suffix in (".yaml", ".yml")))
        elif p.exists():
            out.append(p)
        else:
            raise InputError("no such file or directory", file=str(p), fix="check the path")
    return out


def load_profiles(paths: list[str | Path]) -> list[Profile]:
    """All profiles under `paths` (files or directories), validated."""
    return [load_profile(p) for p in profile_files(paths)]


def version_of(*dists: str) -> str:
    """Installed version of the first distribution found ("" when none is installed)."""
    for d in dists:
        try:
            return metadata.version(d)
        except metadata.PackageNotFoundError:
            continue
    return ""


def engine_version(kind: str) -> str:
    """Installed version of the package engine `kind` runs on ("" when none is installed)."""
    from planner.engines.base import get_engine

    return version_of(*get_engine(kind).package.distributions)


def environment(
    device_name: str, *, driver: str = "", cuda: str = "", engine: str = DEFAULT_KIND
) -> Environment:
    """Where a profile is taken: host, device, driver, CUDA, torch, and the engine profiled
    with its version."""
    return Environment(
        hostname=platform.node(),
        device_name=device_name,
        driver=driver,
        cuda=cuda,
        torch=version_of("torch"),
        engine=engine,
        engine_version=engine_version(engine),
        created_at=datetime.now(UTC).replace(microsecond=0).isoformat(),
    )


def run_key(run: EngineRun) -> tuple[str, str, int]:
    """Identity of an engine run inside a profile."""
    return (run.model, run.variant, run.tp)


def upsert_run(profile: Profile, run: EngineRun) -> None:
    """Put `run` in the profile, replacing the run with the same key."""
    runs = [r for r in profile.engine if run_key(r) != run_key(run)]
    runs.append(run)
    profile.engine = runs


def merge_two(a: Profile, b: Profile) -> Profile:
    """`b` over `a` (same node and GPU type): later figures win; ok runs beat failed ones."""
    if (a.node, a.gpu_type) != (b.node, b.gpu_type):
        raise ValueError("merge_two needs profiles of the same node and GPU type")
    hw = a.hardware.model_dump()
    for k, v in b.hardware.model_dump().items():
        if v not in (None, {}, []):
            hw[k] = v
    runs = {run_key(r): r for r in a.engine}
    for r in b.engine:
        old = runs.get(run_key(r))
        if old is None or r.status == "ok" or old.status == "failed":
            runs[run_key(r)] = r
    calib = b.calibration if b.calibration.model_dump(exclude_none=True) else a.calibration
    env = b.environment if b.environment.created_at >= a.environment.created_at else a.environment
    return Profile(
        node=a.node,
        gpu_type=a.gpu_type,
        environment=env,
        hardware=Hardware.model_validate(hw),
        engine=list(runs.values()),
        calibration=calib,
    )


def merge(profiles: list[Profile]) -> list[Profile]:
    """Combine profiles by (node, GPU type), in the order given."""
    by_key: dict[tuple[str, str], Profile] = {}
    for p in profiles:
        key = (p.node, p.gpu_type)
        by_key[key] = merge_two(by_key[key], p) if key in by_key else p
    return list(by_key.values())


def by_gpu_type(profiles: list[Profile]) -> dict[str, list[Profile]]:
    """Profiles grouped by GPU type (several nodes may hold the same type)."""
    out: dict[str, list[Profile]] = {}
    for p in profiles:
        out.setdefault(p.gpu_type, []).append(p)
    return out


def warnings_here(profiles: list[Profile]) -> list[str]:
    """Why stored profiles may not describe this machine (another engine version or device).

    Commands that take `--profiles` print these (the comparison itself is pure:
    `profile_warnings`).
    """
    from planner.gpu_discovery import discover_gpus

    gpus = discover_gpus().gpus
    here = gpus[0].name if gpus else None
    versions: dict[str, str] = {}  # engine kind -> its version here
    out: list[str] = []
    for p in profiles:
        dev = here if p.gpu_type != "cpu" else None
        kind = p.environment.engine or DEFAULT_KIND
        if kind not in versions:
            versions[kind] = engine_version(kind) if kind in engine_kinds() else ""
        out.extend(profile_warnings(p, engine_version=versions[kind], device_name=dev))
    return out


def _minor(v: str) -> str:
    return ".".join(v.split("+")[0].split(".")[:2])


def profile_warnings(
    profile: Profile, *, engine_version: str, device_name: str | None = None
) -> list[str]:
    """Why a profile may not describe this machine: another version of the engine it was
    profiled with (`engine_version`: that engine's version here), or another device."""
    env = profile.environment
    out: list[str] = []
    was = env.engine_version
    if was and engine_version and _minor(was) != _minor(engine_version):
        kind = env.engine or DEFAULT_KIND
        out.append(
            f"{profile.node}/{profile.gpu_type}: profiled with {kind} {was}, this is {engine_version}"
        )
    if device_name and env.device_name and env.device_name != device_name:
        out.append(
            f"{profile.node}/{profile.gpu_type}: profiled on {env.device_name!r}, this is {device_name!r}"
        )
    if not any(r.status == "ok" for r in profile.engine):
        out.append(
            f"{profile.node}/{profile.gpu_type}: no successful engine run: only microbenchmarks calibrate it"
        )
    return out
