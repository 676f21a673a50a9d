"""The one error hierarchy of planner.

The core raises these; only `planner.cli` turns them into a message and an exit code.
"""

from __future__ import annotations


class PlannerError(Exception):
    """Base of every error planner raises on purpose."""

    exit_code = 1

    def __init__(self, message: str, *, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return self.message if not self.fix else f"{self.message}\n  fix: {self.fix}"


class InputError(PlannerError):
    """Bad user input: a file, a field or a flag. Exit code 2, before any side effect."""

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        path: str | None = None,
        fix: str | None = None,
    ):
        self.file = file
        self.path = path
        # every problem found, as {path, message, fix} (a file's schema errors); [] for one
        self.problems: list[dict[str, str]] = []
        where = ": ".join(p for p in (file, path) if p)
        super().__init__(f"{where}: {message}" if where else message, fix=fix)


class MissingExtraError(PlannerError):
    """A command needs an optional dependency (a pip extra) that is not installed. Exit code 2,
    checked before the command writes or starts anything."""

    exit_code = 2

    def __init__(self, needed_by: str, modules: list[str], extra: str, then: str = ""):
        self.modules = modules
        self.extra = extra
        super().__init__(
            f"{needed_by} needs {', '.join(modules)}, which {'is' if len(modules) == 1 else 'are'} "
            "not installed",
            fix=f"pip install 'planner[{extra}]'  (in a clone: pip install -e '.[{extra}]')"
            + (f"; then {then}" if then else ""),
        )


class InfeasibleError(PlannerError):
    """No plan satisfies the hard constraints (memory, every model served)."""

    exit_code = 2


class SolverError(PlannerError):
    """The MILP solver failed for a reason other than infeasibility."""


class ProfileError(PlannerError):
    """A measurement could not be taken."""


class ApplyError(PlannerError):
    """Reconciling the cluster with a plan point failed; state stays consistent."""


class LaunchError(ApplyError):
    """An engine process failed to start; `reason` is the classified cause."""

    def __init__(self, message: str, *, reason: str, log_tail: str = "", fix: str | None = None):
        super().__init__(message, fix=fix)
        self.reason = reason
        self.log_tail = log_tail


class ControlCallError(ApplyError):
    """A control call to an engine (readiness, health, sleep, wake, metrics) failed: no
    answer, or an answer other than 200 where one was required (planner/control_http.py)."""

    def __init__(self, message: str, *, cause: str, status: int | None = None):
        super().__init__(message)
        self.cause = cause
        self.status = status  # the engine's answer; None when it did not answer


class DrainedError(ApplyError):
    """`planner down` drained the point: nothing starts or wakes until the next `apply`."""


class PortHeldError(LaunchError):
    """Another program listens on an instance's port (exit 3, like a held lease)."""

    exit_code = 3


class LockHeldError(ApplyError):
    """Another apply/adjust holds the state-dir lease."""

    exit_code = 3
