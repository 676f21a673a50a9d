"""What `planner apply` checks before it acts now lives in `planner.app.apply_checks`; kept
here for the tests that take it from this module."""

from planner.app.apply_checks import host_gpus as host_gpus
