"""Settings of `planner optimize`, defined once; the CLI reuses these defaults and ranges."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class OptimizeConfig(BaseModel):
    """Knobs of the search; each has a type, a range, a default and a one-line doc."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    evals: int = Field(default=24, ge=1, le=500, description="plans the Bayesian search evaluates")
    seed: int = Field(default=0, ge=0, description="random seed of the search")
    milp_max_nodes: int = Field(
        default=2000,
        ge=1,
        le=10_000_000,
        description="branch-and-bound nodes of one MILP solve (work, not seconds: same plan "
        "on any machine)",
    )
    milp_time_limit_s: float = Field(
        default=60.0, gt=0, le=600, description="backstop time limit of one MILP solve, s"
    )
    milp_gap: float = Field(
        default=0.005, ge=0, le=0.5, description="relative MIP gap at which a solve stops"
    )
    gpu_memory_margin: float = Field(
        default=0.06, ge=0, le=0.5, description="share of each GPU kept free"
    )
    host_memory_margin: float = Field(
        default=0.25, ge=0, le=0.9, description="share of node RAM kept free"
    )
    max_tp: int = Field(default=8, ge=1, le=64, description="largest tensor-parallel degree tried")
    max_replicas: int = Field(default=4, ge=1, le=64, description="most instances of one model")
    max_model_len: int | None = Field(
        default=None, ge=256, description="cap on max_model_len; default: each model's max_context"
    )
    headroom_range: tuple[float, float] = Field(
        default=(1.0, 2.5), description="capacity / peak demand, searched"
    )
    kv_factor_range: tuple[float, float] = Field(
        default=(0.5, 2.0), description="KV budget vs the mean working set, searched"
    )
    max_num_seqs_choices: tuple[int, ...] = Field(
        default=(16, 32, 64, 128), description="batch caps searched"
    )
    solver: str = Field(default="auto", pattern="^(auto|highs|cbc)$", description="MILP solver")
    validate_days: int | None = Field(
        default=None,
        ge=0,
        le=366,
        description="days of the trace held back to choose and score the points "
        "(default: 2 of a trace of 5 or more days, else 0; which ones: --held-back)",
    )
    held_back: str = Field(
        default="week",
        pattern="^(last|week|spread)$",
        description="which days are held back: week (the default; days that stand for the "
        "week: the last day, then the last of the other kind, busy or quiet against the median "
        "day: a Monday week's Sunday and Friday), last (the trace's last days: a Monday week's "
        "weekend) or spread (days ranked by requests, the ones at the quantiles (k+1/2)/N)",
    )
    awake_min_requests_per_h: tuple[float, ...] = Field(
        default=(0.5, 8.0),
        description="forecast requests/h from which a lazy instance is kept awake in an hour "
        "(one with a slow wake: from any; schedule.fast_wake_s); each value gives every front "
        "point a schedule variant (optimizer/schedule.py)",
    )
    idle_sleep_s: float = Field(
        default=1800.0,
        gt=0,
        le=86400,
        description="schedule variants: a lazy instance sleeps this long after its last "
        "request outside its awake hours, s",
    )
    handoff_min_share: float = Field(
        default=0.03,
        ge=0,
        le=1,
        description="schedule variants: a request wakes ahead the models that came next in "
        "its session after at least this share of its model's requests on the fitted days "
        "(where that puts nobody to sleep: serving_rule.wakes_on_handoff; 0.03 since issue 41: "
        "at 0.1 an agent chain after hours reached its rarer models only by their own wakes)",
    )
    covered_idle_sleep_s: float = Field(
        default=300.0,
        gt=0,
        le=86400,
        description="schedule variants of models stand-ins cover: their lazy instances sleep "
        "this long after their last request too (a stand-in answers while they wake), s",
    )
    quality_weight: float | None = Field(
        default=None,
        ge=0,
        le=1e6,
        description="weight of the quality cost of stand-ins in the search's objective (a "
        "quality cost of 1/weight counts as much as 30 s of switch P95); default: "
        "1 / slo.yaml max_quality_cost, else 10",
    )
    restart_price_gib_h: float = Field(
        default=0.25,
        ge=0,
        le=1e6,
        description="warm GiB-hours one second of instance restarts is worth: a point off the "
        "ladder's placement is written only where, held for a day, the warm GiB it saves "
        "against every rung as good as it outweigh the restart seconds of the hop there and "
        "back at this price (0.25: a 60 s restart is worth 15 GiB-h, 0.625 GiB kept warm for "
        "a day; optimizer/ladder.py)",
    )
    baselines: bool = Field(
        default=True,
        description="score static/lru/melange and each point's lru@ twin; add from-<baseline> "
        "points no point dominates, drop points their twin matches",
    )
