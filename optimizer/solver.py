"""The MILP solver as every solve in the process runs it: single-threaded, a fixed seed,
HiGHS else CBC; what a solve reports beyond its solution (row slack, the solver's work)."""

from __future__ import annotations

import pulp

from planner.errors import SolverError


def run_solver(
    prob: pulp.LpProblem, time_limit_s: float, solver: str = "auto", gap_rel: float = 0.0
) -> tuple[str, float]:
    """Solve `prob` single-threaded with a fixed seed (HiGHS, else CBC): (status, objective).

    Every solve in the process goes through here: HiGHS keeps its thread count per process,
    so one solve with the default threads makes every later `threads=1` solve fail."""
    use_highs = solver in ("auto", "highs") and pulp.HiGHS(msg=False).available()
    if solver == "highs" and not use_highs:
        raise SolverError("HiGHS is not installed", fix="pip install highspy, or use --solver cbc")
    s = (
        pulp.HiGHS(msg=False, timeLimit=time_limit_s, gapRel=gap_rel, threads=1, random_seed=0)
        if use_highs
        else pulp.PULP_CBC_CMD(
            msg=False, timeLimit=time_limit_s, gapRel=gap_rel, threads=1, options=["randomSeed 0"]
        )
    )
    try:
        prob.solve(s)
    except pulp.PulpSolverError as e:
        raise SolverError(f"MILP solver failed: {e}") from None
    st = pulp.LpStatus[prob.status]
    if st == "Optimal":
        # PuLP reports a time-limited solve with an incumbent as Optimal for some solvers;
        # sol_status tells them apart.
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


def row_slack(c: pulp.LpConstraint) -> float:
    """How far a constraint is from binding at the solution (>= 0 when satisfied)."""
    v = c.value() or 0.0  # lhs - rhs, as PuLP stores constraints as expr <sense> 0
    return -v if c.sense == pulp.LpConstraintLE else v
