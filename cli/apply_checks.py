"""What `planner apply` checks before it acts now lives in `planner.app.apply_checks`; kept
here for the callers that take it from this module."""

from planner.app.apply_checks import host_gpus as host_gpus
from planner.app.apply_checks import placed as placed
