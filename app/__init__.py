"""The application layer between the CLI and the optimizer/adjuster (issue 30 item 7).

One resolver for what a plan records (`inputs.resolve`: cluster, models, SLO, calibration),
the one optimize pipeline that turns inputs and a full OptimizeConfig into a plan
(`plans.optimize_plan`, for `optimize`, re-optimization, the nightly re-plan and the benches
alike; the plan records the config, `plans.config_from_plan` rebuilds it) and
re-optimization as an object the adjuster is given (`reoptimize.Reoptimizer`). No printing, no argv: the CLI does that.
"""
