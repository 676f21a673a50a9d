"""The spec of `planner workload synth` (every number of the traffic model, documented once;
synth.py turns it into a trace): roles and their models, the Markov chain over roles, the
team's habits, the drift; its default as commented YAML; binding it to a models file."""

from __future__ import annotations

import datetime as dt
import json

import yaml
from pydantic import Field, model_validator

from planner.schemas.common import Strict

END = "end"
DEFAULT_ROLE_MODELS = {
    "planner": "planner-7b",
    "coder": "coder-32b",
    "reasoner": "reasoner-30b",
    "reviewer": "reviewer-14b",
    "summarizer": "summarizer-8b",
    "embed": "embed-small",
}


class RoleSpec(Strict):
    """One agent role: the model it calls and its token-length laws."""

    model: str = Field(min_length=1, description="model name the role calls (models.yaml name)")
    new_input_median_tokens: float = Field(
        ge=1, le=1e6, description="median tokens a call adds to the prompt (lognormal)"
    )
    new_input_sigma: float = Field(ge=0, le=3, description="lognormal sigma of the added tokens")
    output_median_tokens: float = Field(ge=1, le=1e6, description="median generated tokens")
    output_sigma: float = Field(ge=0, le=3, description="lognormal sigma of generated tokens")
    keeps_context: bool = Field(
        default=True, description="prompt carries the session's context (false: embeddings)"
    )


def _default_roles() -> dict[str, RoleSpec]:
    laws = {  # new input median, sigma, output median, sigma, keeps context
        "planner": (1200, 0.7, 300, 0.7, True),
        "coder": (1500, 0.9, 400, 0.8, True),
        "reasoner": (2000, 0.8, 900, 0.7, True),
        "reviewer": (2500, 0.8, 250, 0.7, True),
        "summarizer": (3000, 0.7, 150, 0.6, True),
        "embed": (400, 0.6, 1, 0.0, False),
    }
    return {
        r: RoleSpec(
            model=DEFAULT_ROLE_MODELS[r],
            new_input_median_tokens=a,
            new_input_sigma=b,
            output_median_tokens=c,
            output_sigma=d,
            keeps_context=e,
        )
        for r, (a, b, c, d, e) in laws.items()
    }


def _default_transitions() -> dict[str, dict[str, float]]:
    return {
        "planner": {
            "coder": 0.55,
            "reasoner": 0.12,
            "embed": 0.1,
            "planner": 0.05,
            "summarizer": 0.05,
            END: 0.13,
        },
        "coder": {
            "coder": 0.6,
            "reviewer": 0.12,
            "planner": 0.04,
            "reasoner": 0.04,
            "embed": 0.04,
            "summarizer": 0.06,
            END: 0.10,
        },
        "reasoner": {
            "coder": 0.5,
            "planner": 0.15,
            "reasoner": 0.1,
            "reviewer": 0.05,
            "summarizer": 0.05,
            END: 0.15,
        },
        "reviewer": {"coder": 0.35, "summarizer": 0.3, "planner": 0.05, END: 0.3},
        "summarizer": {"planner": 0.1, "coder": 0.1, END: 0.8},
        "embed": {"planner": 0.3, "coder": 0.4, "reasoner": 0.1, END: 0.2},
    }


class SynthSpec(Strict):
    """Every parameter of the agent-traffic generator."""

    users: int = Field(default=10, ge=1, le=10000, description="developers served")
    days: int = Field(default=7, ge=1, le=366, description="length of the trace, days")
    start: dt.date = Field(
        default=dt.date(2026, 1, 5),
        description="date of day 0 (sets weekdays); timestamps are seconds since its 00:00 UTC",
    )
    stationary: bool = Field(
        default=False,
        description="no drift and every day a working day: the same daily pattern each day",
    )
    roles: dict[str, RoleSpec] = Field(
        default_factory=_default_roles, description="agent roles: model and length laws"
    )
    start_role: dict[str, float] = Field(
        default_factory=lambda: {
            "planner": 0.55,
            "coder": 0.2,
            "reasoner": 0.1,
            "embed": 0.1,
            "reviewer": 0.05,
        },
        description="probability a turn starts with each role",
    )
    transitions: dict[str, dict[str, float]] = Field(
        default_factory=_default_transitions,
        description="hand-off probabilities role -> next role or 'end' (rows normalized)",
    )
    max_calls_per_turn: int = Field(
        default=40, ge=1, le=1000, description="longest chain of calls in a turn"
    )
    sessions_per_day: float = Field(
        default=8.0, ge=0, le=1000, description="mean sessions a user opens on a working day"
    )
    turns_per_session: float = Field(
        default=10.0, ge=1, le=1000, description="mean turns in a session (geometric)"
    )
    think_median_s: float = Field(
        default=40.0,
        ge=0,
        le=86400,
        description="median gap between a turn's end and the next turn, s",
    )
    think_sigma: float = Field(
        default=1.0, ge=0, le=3, description="lognormal sigma of the think gap"
    )
    tool_gap_median_s: float = Field(
        default=3.0,
        ge=0,
        le=3600,
        description="median tool-call gap between a call's end and the next call, s",
    )
    tool_gap_sigma: float = Field(
        default=1.2, ge=0, le=3, description="lognormal sigma of the tool-call gap"
    )
    decode_s_per_token: float = Field(
        default=0.02,
        ge=0,
        le=10,
        description="time a call spends per output token (spaces the next call), s",
    )
    compact_at_tokens: int = Field(
        default=24576,
        ge=1,
        le=10_000_000,
        description="carried context past this is compacted (next prompt uncached)",
    )
    max_input_tokens: int = Field(
        default=32768, ge=1, le=10_000_000, description="longest prompt; longer ones are truncated"
    )
    work_start_hour: float = Field(
        default=9.0, ge=0, le=24, description="mean local start of the working day, h"
    )
    work_end_hour: float = Field(
        default=18.0, ge=0, le=24, description="mean local end of the working day, h"
    )
    hours_jitter_h: float = Field(
        default=0.75, ge=0, le=6, description="per-user sd of start and end hours, h"
    )
    lunch_hour: float = Field(
        default=12.5, ge=0, le=24, description="local middle of the lunch break, h"
    )
    lunch_width_h: float = Field(default=1.0, ge=0, le=6, description="width of the lunch dip, h")
    lunch_jitter_h: float = Field(
        default=0.5, ge=0, le=6, description="per-user sd of the lunch time, h"
    )
    lunch_dip: float = Field(
        default=0.2, ge=0, le=1, description="activity left at the middle of lunch (1: no dip)"
    )
    weekend_activity: float = Field(
        default=0.08, ge=0, le=1, description="weekend sessions as a share of a working day's"
    )
    absence_prob: float = Field(
        default=0.05, ge=0, le=1, description="chance a user is off on a working day"
    )
    user_activity_sigma: float = Field(
        default=0.4,
        ge=0,
        le=3,
        description="lognormal sigma of per-user activity (heavy vs light users)",
    )
    timezones_h: list[float] = Field(
        default_factory=lambda: [0.0],
        description="UTC offsets of the users' time zones (round-robin), h",
    )
    morning_coding_boost: float = Field(
        default=1.6,
        ge=0,
        le=100,
        description="before lunch, hand-offs to 'coder' are this much likelier",
    )
    afternoon_review_boost: float = Field(
        default=1.8,
        ge=0,
        le=100,
        description="after lunch, hand-offs to 'reviewer'/'summarizer' are this much likelier",
    )
    adopted_role: str | None = Field(
        default="reasoner",
        description="role whose model is adopted mid-trace (absent before); null: none",
    )
    adoption_day: int = Field(
        default=2, ge=0, le=366, description="day index the adopted role appears"
    )
    switch_role: str | None = Field(
        default="coder", description="role a user group moves to another model; null: none"
    )
    switch_to_role: str = Field(
        default="reasoner", description="the group then calls this role's model for switch_role"
    )
    switch_user_fraction: float = Field(
        default=0.3, ge=0, le=1, description="share of users in the switching group"
    )
    switch_day: int = Field(default=4, ge=0, le=366, description="day index the group switches")

    @model_validator(mode="after")
    def _check(self) -> SynthSpec:
        roles = set(self.roles)
        if not roles:
            raise ValueError("roles: at least one role")
        for r in self.roles:
            if r == END:
                raise ValueError(f"roles: {END!r} is reserved (the end of a turn)")
        bad = sorted(set(self.start_role) - roles)
        if bad:
            raise ValueError(f"start_role names unknown roles {bad}; roles are {sorted(roles)}")
        if sum(self.start_role.values()) <= 0 or min(self.start_role.values(), default=0) < 0:
            raise ValueError("start_role: probabilities must be >= 0 with a positive sum")
        self._check_transitions(roles)
        for name in ("adopted_role", "switch_role", "switch_to_role"):
            v = getattr(self, name)
            if v is not None and v not in roles:
                raise ValueError(f"{name}: {v!r} is not a role; roles are {sorted(roles)}")
        if self.work_end_hour <= self.work_start_hour:
            raise ValueError("work_end_hour must be after work_start_hour")
        return self

    def _check_transitions(self, roles: set[str]) -> None:
        """Each row of `transitions` is a role's, to known roles (or the end of a turn),
        with probabilities >= 0 and a positive sum."""
        for r, row in self.transitions.items():
            if r not in roles:
                raise ValueError(f"transitions: {r!r} is not a role; roles are {sorted(roles)}")
            unknown = sorted(set(row) - roles - {END})
            if unknown:
                raise ValueError(f"transitions[{r}] names unknown roles {unknown}")
            if min(row.values(), default=0) < 0 or sum(row.values()) <= 0:
                raise ValueError(
                    f"transitions[{r}]: probabilities must be >= 0 with a positive sum"
                )


def default_spec() -> SynthSpec:
    """The default spec (10 users, 7 days, the lab16 model names)."""
    return SynthSpec()


def default_spec_yaml() -> str:
    """The default spec as YAML, each field preceded by its one-line doc."""
    spec = default_spec()
    data = spec.model_dump(mode="json")
    lines = [
        "# planner workload synth spec (all fields optional; these are the defaults).",
        "# Timestamps are seconds since 00:00 UTC of `start`.",
    ]
    for name, field in SynthSpec.model_fields.items():
        lines.append("")
        lines.append(f"# {field.description}")
        if name == "roles":
            lines.append(
                "#   per role: "
                + "; ".join(f"{k}: {f.description}" for k, f in RoleSpec.model_fields.items())
            )
        value = data[name]
        if isinstance(value, dict):
            text = yaml.safe_dump(
                {name: value}, sort_keys=False, default_flow_style=None, width=100
            )
        elif isinstance(value, list):
            text = f"{name}: {json.dumps(value)}"  # JSON is YAML: a short inline list
        else:
            text = yaml.safe_dump({name: value}, sort_keys=False, default_flow_style=False)
        lines.append(text.rstrip("\n"))
    return "\n".join(lines) + "\n"


def bind_models(spec: SynthSpec, names: list[str]) -> tuple[SynthSpec, list[str]]:
    """Point the roles at a catalog's model names; returns the spec and notes to show.

    Roles whose model is in `names` keep it. The others take the catalog's models that no
    role uses yet, in catalog order (then all of them again, in order, if they run out).
    Catalog models left without a role get no traffic; the notes say all of this.
    """
    if not names:
        return spec, []
    known = set(names)
    used = {r.model for r in spec.roles.values() if r.model in known}
    free = [n for n in names if n not in used]
    pool = free or list(names)
    roles = {}
    notes = []
    i = 0
    for role, rs in spec.roles.items():
        if rs.model in known:
            roles[role] = rs
            continue
        new = pool[i % len(pool)]
        i += 1
        roles[role] = rs.model_copy(update={"model": new})
        notes.append(f"role {role}: {rs.model} is not in the models file; it calls {new}")
    if notes:
        notes.insert(
            0, "the spec names models the models file lacks; mapped onto its models in order"
        )
    unused = [n for n in names if n not in {r.model for r in roles.values()}]
    if unused:
        notes.append(f"models with no role (no traffic): {unused}")
    return (spec.model_copy(update={"roles": roles}) if i else spec), notes
