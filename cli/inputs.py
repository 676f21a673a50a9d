"""Loading input files now lives in `planner.app.files`; kept here for the callers that take
it from this module."""

from planner.app.files import silence_solver_banner as silence_solver_banner
from planner.app.files import synth_spec as synth_spec
from planner.app.files import workload as workload
