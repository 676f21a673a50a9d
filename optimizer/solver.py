"""Running a MILP: single-threaded, seeded, and stopped by work, not by seconds.

A solve that stops on a time limit returns whatever incumbent it had at that second, so on a
loaded machine the same inputs can give another plan. The limit that decides is a count of
branch-and-bound nodes (`max_nodes`), which does not depend on the machine; the time limit
stays only as a backstop against a pathological model.
"""

from __future__ import annotations

import pulp

from planner.errors import SolverError


class _HiGHS(pulp.HiGHS):
    """PuLP's HiGHS, which has no status for a stop at the node limit (a KeyError in PuLP 3.3
    after the solution values are assigned): reported as time-limited solves are."""

    def findSolutionValues(self, lp):
        try:
            return super().findSolutionValues(lp)
        except KeyError:
            import highspy  # PuLP's HiGHS is available: so is highspy

            if lp.solverModel.getModelStatus() != highspy.HighsModelStatus.kSolutionLimit:
                raise
        if lp.solverModel.getInfo().primal_solution_status == 0:  # no incumbent
            return pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound
        return pulp.LpStatusOptimal, pulp.LpSolutionIntegerFeasible


def run_solver(
    prob: pulp.LpProblem,
    time_limit_s: float,
    solver: str = "auto",
    gap_rel: float = 0.0,
    max_nodes: int | None = None,
) -> tuple[str, float]:
    """Solve `prob` single-threaded with a fixed seed (HiGHS, else CBC): (status, objective).

    Every solve in the process goes through here: HiGHS keeps its thread count per process,
    so one solve with the default threads makes every later `threads=1` solve fail."""
    use_highs = solver in ("auto", "highs") and pulp.HiGHS(msg=False).available()
    if solver == "highs" and not use_highs:
        raise SolverError("HiGHS is not installed", fix="pip install highspy, or use --solver cbc")
    limits = {"timeLimit": time_limit_s, "gapRel": gap_rel, "threads": 1}
    if use_highs:
        nodes = {} if max_nodes is None else {"mip_max_nodes": max_nodes}
        s = _HiGHS(msg=False, random_seed=0, **limits, **nodes)
    else:
        s = pulp.PULP_CBC_CMD(msg=False, options=["randomSeed 0"], maxNodes=max_nodes, **limits)
    try:
        prob.solve(s)
    except pulp.PulpSolverError as e:
        raise SolverError(f"MILP solver failed: {e}") from None
    st = pulp.LpStatus[prob.status]
    if st == "Optimal":
        # PuLP reports a limited solve with an incumbent as Optimal; sol_status tells them apart.
        feasible_only = getattr(prob, "sol_status", 1) == pulp.LpSolutionIntegerFeasible
        return ("feasible" if feasible_only else "optimal"), float(
            pulp.value(prob.objective) or 0.0
        )
    if st in ("Infeasible", "Undefined") or getattr(prob, "sol_status", 0) in (
        pulp.LpSolutionInfeasible,
        pulp.LpSolutionNoSolutionFound,
    ):
        return "infeasible", float("inf")
    raise SolverError(f"MILP ended with status {st}")


def solver_work(prob: pulp.LpProblem) -> tuple[int, int]:
    """Branch-and-bound nodes and LP iterations of the solve: solver work that, unlike its
    seconds, does not depend on the machine's load ((0, 0) where the solver, CBC, does not
    report it)."""
    model = getattr(prob, "solverModel", None)
    if model is None or not hasattr(model, "getInfo"):
        return 0, 0
    info = model.getInfo()
    return int(info.mip_node_count), int(info.simplex_iteration_count)
