"""Loading what several commands take (`planner.app.files`), with the CLI's progress and
warnings; the loaders are re-exported for the commands that take them from here."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.app.files import MAX_SYNTH_REQUESTS as MAX_SYNTH_REQUESTS
from planner.app.files import check_spec_size as check_spec_size
from planner.app.files import cluster as cluster
from planner.app.files import input_path as input_path
from planner.app.files import models as models
from planner.app.files import quiet_c_stdout as quiet_c_stdout
from planner.app.files import silence_solver_banner as silence_solver_banner
from planner.app.files import slo as slo
from planner.app.files import synth_spec as synth_spec
from planner.app.plans import provenance as provenance  # the commands use it from here
from planner.schemas.models import Models
from planner.schemas.slo import Slo

if TYPE_CHECKING:
    import pandas as pd


def workload(path: Path, ms: Models, seed: int) -> pd.DataFrame:
    """A trace file, or a synth spec (.yaml) generated on the fly, with a progress line."""
    from planner.app import files
    from planner.cli.common import err_console

    with err_console.status(f"reading the workload {path.name} ..."):
        return files.workload(path, ms, seed)


def calibration(profiles: Path | None) -> dict[str, Any] | None:
    """GPU type -> Calib fitted in the profiles under `profiles` (a folder or a file); its
    warnings printed (`planner.app.inputs.calibration`)."""
    if profiles is None:
        return None
    from planner.app.inputs import calibration as load
    from planner.cli.common import err_console

    calib, warnings = load(profiles)
    for w in warnings:
        err_console.print(f"[yellow]warning:[/] {w}", highlight=False)
    return calib


def scorer(trace, sl: Slo):
    """The optimizer's scorer (kept for callers not yet on `planner.optimizer.scoring`)."""
    from planner.optimizer.scoring import scorer as _scorer

    return _scorer(trace, sl)
