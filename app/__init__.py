"""The application layer: the SDK under the CLI (issue 30 item 7, issue 45 item 1).

One service per command family, with typed inputs and results: `optimize`, `evaluate`,
`apply` (apply, status, down, the controller the gateway and adjust run), `adjust` (live,
replay, re-plan; its setup in `adjust_inputs`), `gateway`, `profile`, `workload`,
`estimate`, `plan_show`, `explain`, `validate`, `state`, `init` and `example`. They
share input loading (`files`), the backend choice (`backends`), one resolver for what a plan
records (`inputs.resolve`), the one optimize pipeline (`plans.optimize_plan`, for
`optimize`, re-optimization, the nightly re-plan and the benches alike; the plan records the
config, `plans.config_from_plan` rebuilds it) and re-optimization as an object the adjuster
is given (`reoptimize.Reoptimizer`). No printing, no argv, no exits: the CLI renders what a
service returns, and the benches call the same services.
"""
