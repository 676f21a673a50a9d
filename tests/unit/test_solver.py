"""The MILP stops on a count of branch-and-bound nodes, a limit that does not depend on the
machine: the same problem gives the same answer however loaded the host is."""

import random

import pulp
import pytest

from planner.optimizer.solver import run_solver, solver_work


def _hard_knapsack() -> pulp.LpProblem:
    """Two knapsack rows with noisy values: HiGHS needs many nodes to prove optimality."""
    rng = random.Random(1)
    n = 90
    w = [rng.randint(1000, 2000) for _ in range(n)]
    v = [wi + rng.randint(-300, 300) for wi in w]
    prob = pulp.LpProblem("knapsack", pulp.LpMaximize)
    x = [pulp.LpVariable(f"x{i}", cat="Binary") for i in range(n)]
    prob += pulp.lpSum(v[i] * x[i] for i in range(n))
    prob += pulp.lpSum(w[i] * x[i] for i in range(n)) <= sum(w) // 2
    prob += pulp.lpSum(v[i] * x[i] for i in range(0, n, 2)) <= sum(v) // 5 + 7
    for i in range(0, n, 3):
        prob += x[i] + x[i + 1] + x[i + 2] <= 2
    return prob


def test_a_node_limit_returns_the_incumbent_and_the_same_one_every_time():
    got = []
    for _ in range(2):
        prob = _hard_knapsack()
        status, objective = run_solver(prob, time_limit_s=600, solver="highs", max_nodes=5)
        nodes, _ = solver_work(prob)
        got.append((status, objective, [v.value() for v in prob.variables()]))
        assert status == "feasible"  # PuLP 3.3 alone raises KeyError on this stop
        assert nodes <= 6
    assert got[0] == got[1]


def test_without_a_node_limit_the_solve_proves_optimality_and_is_no_worse():
    limited = _hard_knapsack()
    _, capped = run_solver(limited, time_limit_s=600, solver="highs", max_nodes=5)
    full = _hard_knapsack()
    status, best = run_solver(full, time_limit_s=600, solver="highs")
    assert status == "optimal"
    assert best >= capped  # maximise: the capped incumbent is feasible, never better


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_an_infeasible_problem_is_reported_as_such_under_a_node_limit(solver):
    prob = pulp.LpProblem("nope", pulp.LpMinimize)
    x = pulp.LpVariable("x", cat="Binary")
    prob += x
    prob += x >= 2
    assert run_solver(prob, time_limit_s=60, solver=solver, max_nodes=5)[0] == "infeasible"
