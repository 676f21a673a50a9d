"""The application layer between the CLI and the optimizer/adjuster (issue 30 item 7).

One resolver for what a plan records (`inputs.resolve`: cluster, models, SLO, calibration),
one function that turns a search result into a plan (`plans.plan_from_result`, for
`optimize` and for re-optimization alike) and re-optimization as an object the adjuster is
given (`reoptimize.Reoptimizer`). No printing, no argv: the CLI does that.
"""
