"""What `planner apply --previous` returns to: the plan and point in force before the last
apply or `down`, recorded in the state dir with a copy of the plan file (0600) for when the
file changes after it was applied."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from planner.errors import InputError

if TYPE_CHECKING:
    from planner.adjuster.state import StateStore


@dataclass
class Previous:
    """What `apply --previous` restores: a plan file (the original when it still has the
    digest it was applied with, else the copy the state dir kept) and a point."""

    plan_path: Path
    point: str
    sha: str
    what: str  # how `apply --previous` names it before it acts
    inputs: dict[str, Path]  # cluster/models the copy records, found beside the original


def _inputs_beside(copy: Path, original: Path) -> dict[str, Path]:
    """The copy's recorded cluster and models files, relative to the original's folder (the
    copy lives in the state dir, where its relative paths mean nothing)."""
    from planner.schemas import load_plan

    refs = load_plan(copy).inputs
    out = {}
    for key in ("cluster", "models"):
        ref = refs.get(key)
        if ref is not None and ref.path:
            p = Path(ref.path).expanduser()
            out[key] = p if p.is_absolute() else original.parent / p
    return out


def previous_applied(plan_path: Path | None, point: str | None, state_dir: Path | None) -> Previous:
    """The plan and point `apply` recorded as in force before the last apply or `down`
    (--previous)."""
    from planner.adjuster.state import StateStore, existing_state_dir
    from planner.io import sha256_file

    if plan_path is not None or point is not None:
        raise InputError(
            "--previous takes no PLAN or --point (it applies the ones recorded)",
            path="--previous",
            fix="drop PLAN and --point, or drop --previous",
        )
    with StateStore(existing_state_dir(state_dir), readonly=True) as state:
        meta = state.meta()
    prev_plan, prev_point = meta.get("previous_plan_path", ""), meta.get("previous_point", "")
    if not prev_plan or not prev_point:
        raise InputError(
            "no previous apply is recorded in this state dir",
            file=str(state_dir or "the default state dir"),
            fix="apply a plan first; `planner history` lists what was applied",
        )
    sha, copy = meta.get("previous_plan_sha", ""), meta.get("previous_plan_copy", "")
    path = Path(prev_plan)
    same = path.is_file() and (not sha or sha256_file(path) == sha)
    what = f"point {prev_point} of {prev_plan}" + (f" (sha256 {sha[:12]})" if sha else "")
    inputs: dict[str, Path] = {}
    if not same and copy and Path(copy).is_file():
        what += f", from the copy {copy} (the file changed since)"
        path = Path(copy)
        inputs = _inputs_beside(path, Path(prev_plan))
    elif not same:
        raise InputError(
            f"the plan of the previous apply ({prev_plan}) changed or is gone, and no copy of "
            "it was kept",
            file=prev_plan,
            fix="apply the plan you want by name (`planner history` lists what was applied)",
        )
    return Previous(path, prev_point, sha, what, inputs)


_KEPT = ("plan_path", "point", "plan_sha", "plan_copy")  # what `--previous` reads back


def keep_previous(state: StateStore, before: dict[str, str], plan_path: str, point: str) -> None:
    """Record the plan and point in force before this apply, when it changed them (what
    `apply --previous` returns to; applying it swaps them back, as `cd -` does). After a
    `down` nothing was in force: what `down` kept stays."""
    old_plan, old_point = before.get("plan_path", ""), before.get("point", "")
    if old_plan and old_point and (old_plan, old_point) != (plan_path, point):
        state.set_meta(**{f"previous_{k}": before.get(k, "") for k in _KEPT})


def keep_plan_copy(state: StateStore, plan_path: Path, sha: str) -> str:
    """A copy of the applied plan file under `<state dir>/plans/<digest>.yaml` (0600; one per
    version): what `apply --previous` reads when the file changed since. Returns its path."""
    from planner.io import atomic_write_bytes
    from planner.private import private_dir

    if not sha:
        return ""
    dest = private_dir(state.dir / "plans") / f"{sha[:16]}.yaml"
    if not dest.exists():
        atomic_write_bytes(dest, Path(plan_path).read_bytes(), 0o600)
    return str(dest)
