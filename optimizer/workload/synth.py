"""Synthetic agent traffic of a small developer team (pure: spec + seed -> trace frame).

Model of the traffic, every number a `SynthSpec` field:

- Each user has habits: working hours (start/end with per-user jitter), a lunch dip, a time
  zone, an activity level (heavy and light users). Weekdays are working days; weekends get
  a small share of the sessions; a user is off some working days.
- A user opens sessions (Poisson per day, start times drawn from the day's activity curve).
  A session is a series of turns (a person's prompt); between turns the person thinks.
- A turn is an agent workflow: a chain of model calls that follows a Markov chain over
  roles (planner -> coder -> coder -> reviewer -> summarizer -> end), each call's output
  decoded at `decode_s_per_token`, then a tool-call gap before the next call.
- Each role maps to a model; a call adds `new` tokens (lognormal by role) to the session's
  context on that model; the prompt is the carried context plus the new tokens, and
  `cached_tokens` is the carried part (the prefix the same session's previous call to the
  same model computed). When the carried context passes `compact_at_tokens` it is compacted
  (the agent summarizes and restarts): the next prompt starts fresh with no cache.
- Drift (off when `stationary`): mornings favour coding, afternoons review and
  summaries; one role's model is adopted mid-week (absent before `adoption_day`); one
  group of users switches one role onto another role's model from `switch_day`.
  `stationary` also treats every day as a working day, so the daily pattern repeats.

The spec and its defaults: synth_spec.py. Vectorised with numpy over sessions, turns and calls; the only Python loops run over users
and over steps of the Markov chains. Same spec and seed, same frame.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from planner.optimizer.workload.synth_spec import END, SynthSpec
from planner.trace.frame import COLUMNS, DTYPES, empty_trace


def _cum_rows(mat: np.ndarray) -> np.ndarray:
    """Row-normalized cumulative probabilities (last column exactly 1)."""
    mat = mat / mat.sum(axis=-1, keepdims=True)
    cum = np.cumsum(mat, axis=-1)
    cum[..., -1] = 1.0
    return cum


def _group_cumsum_exclusive(x: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per contiguous group, the sum of the earlier elements (0 for each group's first)."""
    cs = np.cumsum(x) - x
    first = np.maximum.accumulate(np.where(starts, np.arange(len(x)), 0))
    return cs - cs[first]


def _activity_curve(spec: SynthSpec, start_h: float, end_h: float, lunch_h: float) -> np.ndarray:
    """Relative activity per local minute of a day for one user (0..1)."""
    h = (np.arange(1440) + 0.5) / 60.0
    edge = 0.25  # h: ramp width of arriving in the morning / leaving in the evening
    on = 1.0 / (1.0 + np.exp(-(h - start_h) / edge)) / (1.0 + np.exp(-(end_h - h) / edge))
    half = max(spec.lunch_width_h / 2.0, 1e-6)
    dip = 1.0 - (1.0 - spec.lunch_dip) * np.exp(-0.5 * ((h - lunch_h) / half) ** 2)
    return on * dip


class _Sessions(NamedTuple):
    """Every session of every user and day: its user, day, start (trace time) and local hour."""

    user: np.ndarray
    day: np.ndarray
    start_s: np.ndarray
    local_h: np.ndarray


class _Calls(NamedTuple):
    """Every model call in session order: its turn, role and session; and each turn's session."""

    turn: np.ndarray
    role: np.ndarray
    sess: np.ndarray
    turn_sess: np.ndarray


def synth(
    spec: SynthSpec, seed: int = 0, max_context: Mapping[str, int] | None = None
) -> pd.DataFrame:
    """Generate a canonical trace (planner.trace.frame columns and dtypes, sorted by time).

    `max_context` (model -> tokens): each request's prompt + output stays within it.
    """
    rng = np.random.default_rng(seed)  # the steps draw from it in this order: same seed, same frame
    role_names = list(spec.roles)
    model_names = list(dict.fromkeys(rs.model for rs in spec.roles.values()))
    role_model = np.array([model_names.index(spec.roles[r].model) for r in role_names])
    ses = _sessions(spec, rng)
    if ses is None:
        return empty_trace()
    cum_mats, cum_starts, s_variant = _role_chains(spec, ses)
    calls = _calls(spec, rng, s_variant, cum_starts, cum_mats)
    new_in, out, keeps = _lengths(spec, rng, calls.role)
    c_model = _models(spec, rng, ses, calls, role_model)
    ts = _timestamps(spec, rng, ses, calls, out)
    inp, cached = _context(spec, calls, c_model, keeps[calls.role], new_in, out, len(model_names))
    limit = np.array([(max_context or {}).get(m, 1 << 62) for m in model_names])[c_model]
    out, inp, cached = _within_context(limit, out, inp, cached)
    return _frame(spec, ses, calls, model_names, ts, c_model, inp, out, cached)


def _sessions(spec: SynthSpec, rng: np.random.Generator) -> _Sessions | None:
    """Users' habits, then their sessions per day and start times (None: no session)."""
    n_users, n_days = spec.users, spec.days
    start_h = spec.work_start_hour + spec.hours_jitter_h * rng.standard_normal(n_users)
    end_h = spec.work_end_hour + spec.hours_jitter_h * rng.standard_normal(n_users)
    end_h = np.maximum(end_h, start_h + 1.0)
    lunch_h = spec.lunch_hour + spec.lunch_jitter_h * rng.standard_normal(n_users)
    activity = rng.lognormal(-0.5 * spec.user_activity_sigma**2, spec.user_activity_sigma, n_users)
    tz_h = (
        np.array([spec.timezones_h[u % len(spec.timezones_h)] for u in range(n_users)])
        if spec.timezones_h
        else np.zeros(n_users)
    )
    weekday0 = spec.start.weekday()
    weekend = ((weekday0 + np.arange(n_days)) % 7 >= 5) & (not spec.stationary)
    day_mult = np.where(weekend, spec.weekend_activity, 1.0)
    absent = rng.random((n_users, n_days)) < spec.absence_prob
    lam = spec.sessions_per_day * activity[:, None] * day_mult[None, :] * ~absent
    n_sess_ud = rng.poisson(lam)  # (users, days)
    s_user = np.repeat(np.repeat(np.arange(n_users), n_days), n_sess_ud.ravel())
    s_day = np.repeat(np.tile(np.arange(n_days), n_users), n_sess_ud.ravel())
    n_sess = len(s_user)
    if n_sess == 0:
        return None
    s_local_s = np.empty(n_sess)
    u_draw = rng.random(n_sess)
    jitter = rng.random(n_sess)
    for u in range(n_users):  # one activity curve per user; sample minutes by inverse CDF
        m = s_user == u
        if not m.any():
            continue
        cdf = np.cumsum(_activity_curve(spec, start_h[u], end_h[u], lunch_h[u]))
        cdf /= cdf[-1]
        minute = np.searchsorted(cdf, u_draw[m], side="right")
        s_local_s[m] = (np.minimum(minute, 1439) + jitter[m]) * 60.0
    s_start = s_day * 86400.0 + s_local_s - tz_h[s_user] * 3600.0
    return _Sessions(s_user, s_day, s_start, s_local_s / 3600.0)


def _role_chains(spec: SynthSpec, ses: _Sessions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The role chains' cumulative transition and start rows of each matrix variant (phase:
    0 neutral, 1 morning, 2 afternoon; x adopted: 0/1), and each session's variant."""
    role_names = list(spec.roles)
    n_roles = len(role_names)
    ridx = {r: i for i, r in enumerate(role_names)}
    base = np.zeros((n_roles, n_roles + 1))
    for r, row in spec.transitions.items():
        for to, p in row.items():
            base[ridx[r], n_roles if to == END else ridx[to]] = p
    for r in role_names:  # a role without a row ends the turn
        if r not in spec.transitions:
            base[ridx[r], n_roles] = 1.0
    start_p = np.array([spec.start_role.get(r, 0.0) for r in role_names])
    mats = np.empty((6, n_roles, n_roles + 1))
    starts = np.empty((6, n_roles))
    for ph in range(3):
        col_mult = _phase_boosts(spec, ridx, ph)
        for ad in range(2):
            m = base * col_mult
            sp = start_p * col_mult[:n_roles]
            if ad == 0 and spec.adopted_role:
                m[:, ridx[spec.adopted_role]] = 0.0
                sp = sp.copy()
                sp[ridx[spec.adopted_role]] = 0.0
                m[ridx[spec.adopted_role]] = 0.0
                m[ridx[spec.adopted_role], n_roles] = 1.0
            m[m.sum(axis=1) == 0, n_roles] = 1.0
            mats[ph * 2 + ad] = m
            starts[ph * 2 + ad] = sp if sp.sum() > 0 else np.ones(n_roles)
    return _cum_rows(mats), _cum_rows(starts), _session_variants(spec, ses)


def _phase_boosts(spec: SynthSpec, ridx: dict[str, int], phase: int) -> np.ndarray:
    """The multiplier of each role's column (and the end's) in a phase: coding in the
    morning (1), reviews and summaries in the afternoon (2)."""
    col_mult = np.ones(len(ridx) + 1)
    if phase == 1 and "coder" in ridx:
        col_mult[ridx["coder"]] = spec.morning_coding_boost
    if phase == 2:
        for r in ("reviewer", "summarizer"):
            if r in ridx:
                col_mult[ridx[r]] = spec.afternoon_review_boost
    return col_mult


def _session_variants(spec: SynthSpec, ses: _Sessions) -> np.ndarray:
    """Each session's matrix variant: phase * 2 + adopted (`_role_chains`)."""
    n_sess = len(ses.user)
    if spec.stationary:
        phase = np.zeros(n_sess, dtype=int)
        adopted = np.ones(n_sess, dtype=int)
    else:
        phase = np.where(ses.local_h < spec.lunch_hour, 1, 2)
        adopted = (
            (ses.day >= spec.adoption_day).astype(int)
            if spec.adopted_role
            else np.ones(n_sess, int)
        )
    return phase * 2 + adopted


def _calls(
    spec: SynthSpec,
    rng: np.random.Generator,
    s_variant: np.ndarray,
    cum_starts: np.ndarray,
    cum_mats: np.ndarray,
) -> _Calls:
    """Turns per session, then each turn's calls: Markov chains over roles, all turns at once."""
    n_roles = cum_starts.shape[1]
    n_turns_s = rng.geometric(1.0 / spec.turns_per_session, len(s_variant))
    t_sess = np.repeat(np.arange(len(s_variant)), n_turns_s)
    n_turns = len(t_sess)
    t_var = s_variant[t_sess]
    state = (rng.random(n_turns)[:, None] > cum_starts[t_var]).sum(axis=1)
    call_turn = [np.arange(n_turns)]
    call_step = [np.zeros(n_turns, int)]
    call_role = [state]
    active = np.arange(n_turns)
    for step in range(1, spec.max_calls_per_turn):
        u = rng.random(len(active))
        nxt = (u[:, None] > cum_mats[t_var[active], state]).sum(axis=1)
        keep = nxt < n_roles
        active, state = active[keep], nxt[keep]
        if len(active) == 0:
            break
        call_turn.append(active)
        call_step.append(np.full(len(active), step))
        call_role.append(state)
    c_turn = np.concatenate(call_turn)
    c_step = np.concatenate(call_step)
    c_role = np.concatenate(call_role)
    order = np.lexsort((c_step, c_turn))  # turn-major, then step: the session's call order
    c_turn, c_role = c_turn[order], c_role[order]
    return _Calls(c_turn, c_role, t_sess[c_turn], t_sess)


def _lengths(
    spec: SynthSpec, rng: np.random.Generator, c_role: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each call's new input and output tokens (lognormal by role), and per role whether it
    keeps its context."""
    role_names = list(spec.roles)
    mu_in = np.log([spec.roles[r].new_input_median_tokens for r in role_names])
    sd_in = np.array([spec.roles[r].new_input_sigma for r in role_names])
    mu_out = np.log([spec.roles[r].output_median_tokens for r in role_names])
    sd_out = np.array([spec.roles[r].output_sigma for r in role_names])
    keeps = np.array([spec.roles[r].keeps_context for r in role_names])
    z = rng.standard_normal((2, len(c_role)))
    new_in = np.maximum(1, np.rint(np.exp(mu_in[c_role] + sd_in[c_role] * z[0]))).astype(np.int64)
    out = np.maximum(1, np.rint(np.exp(mu_out[c_role] + sd_out[c_role] * z[1]))).astype(np.int64)
    return new_in, out, keeps


def _models(
    spec: SynthSpec, rng: np.random.Generator, ses: _Sessions, calls: _Calls, role_model: np.ndarray
) -> np.ndarray:
    """Each call's model: its role's, but the switching group's from `switch_day`."""
    c_model = role_model[calls.role]
    if spec.switch_role and not spec.stationary and spec.switch_user_fraction > 0:
        ridx = {r: i for i, r in enumerate(spec.roles)}
        n_users = spec.users
        n_group = round(spec.switch_user_fraction * n_users)
        group = np.zeros(n_users, bool)
        group[rng.permutation(n_users)[:n_group]] = True
        sw = (
            group[ses.user[calls.sess]]
            & (ses.day[calls.sess] >= spec.switch_day)
            & (calls.role == ridx[spec.switch_role])
        )
        c_model = np.where(sw, role_model[ridx[spec.switch_to_role]], c_model)
    return c_model


def _timestamps(
    spec: SynthSpec, rng: np.random.Generator, ses: _Sessions, calls: _Calls, out: np.ndarray
) -> np.ndarray:
    """Each call's arrival: its turn's start plus the decodes and tool gaps before it in the
    turn; turns follow each other after the person's think time."""
    c_turn, t_sess = calls.turn, calls.turn_sess
    n_calls, n_turns = len(c_turn), len(t_sess)
    decode_s = out * spec.decode_s_per_token  # s: time the call spends generating
    gap_s = spec.tool_gap_median_s * np.exp(spec.tool_gap_sigma * rng.standard_normal(n_calls))
    first_in_turn = np.ones(n_calls, bool)
    first_in_turn[1:] = c_turn[1:] != c_turn[:-1]
    step_s = np.where(first_in_turn, 0.0, np.roll(decode_s, 1) + gap_s)
    offset_s = _group_cumsum_exclusive(step_s, first_in_turn) + step_s
    last_in_turn = np.ones(n_calls, bool)
    last_in_turn[:-1] = first_in_turn[1:]
    turn_len_s = np.zeros(n_turns)
    turn_len_s[c_turn[last_in_turn]] = offset_s[last_in_turn] + decode_s[last_in_turn]
    think_s = spec.think_median_s * np.exp(spec.think_sigma * rng.standard_normal(n_turns))
    first_turn = np.ones(n_turns, bool)
    first_turn[1:] = t_sess[1:] != t_sess[:-1]
    t_step = np.where(first_turn, 0.0, np.roll(turn_len_s, 1) + think_s)
    t_start = ses.start_s[t_sess] + _group_cumsum_exclusive(t_step, first_turn) + t_step
    return t_start[c_turn] + offset_s


def _context(
    spec: SynthSpec,
    calls: _Calls,
    c_model: np.ndarray,
    c_keeps: np.ndarray,
    new_in: np.ndarray,
    out: np.ndarray,
    n_models: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Each call's prompt and cached prefix: the context its session carries on its model
    (roles that keep it), compacted at `compact_at_tokens`."""
    n_calls = len(calls.turn)
    key = (calls.sess * n_models + c_model) * 2 + c_keeps
    g = np.argsort(key, kind="stable")  # groups in call order
    gk = key[g]
    g_first = np.ones(n_calls, bool)
    g_first[1:] = gk[1:] != gk[:-1]
    flow = np.where(c_keeps[g], new_in[g] + out[g], 0)
    before = _group_cumsum_exclusive(flow, g_first)
    seg = before // spec.compact_at_tokens
    carried = before - seg * spec.compact_at_tokens
    new_seg = g_first.copy()
    new_seg[1:] |= seg[1:] != seg[:-1]
    cached_g = np.where(new_seg, 0, carried)
    input_g = np.minimum(new_in[g] + carried, spec.max_input_tokens)
    inp = np.empty(n_calls, np.int64)
    cached = np.empty(n_calls, np.int64)
    inp[g] = input_g
    cached[g] = np.minimum(cached_g, input_g)
    return inp, cached


def _within_context(
    limit: np.ndarray, out: np.ndarray, inp: np.ndarray, cached: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """vLLM refuses prompt + output past max_model_len: the agent shortens its answer to at
    most half the context (`limit`, per call), then its prompt (dropping the oldest turns) to
    the rest."""
    out = np.minimum(out, np.maximum(1, limit // 2))
    inp = np.minimum(inp, limit - out)
    return out, inp, np.minimum(cached, inp)


def _frame(
    spec: SynthSpec,
    ses: _Sessions,
    calls: _Calls,
    model_names: list[str],
    ts: np.ndarray,
    c_model: np.ndarray,
    inp: np.ndarray,
    out: np.ndarray,
    cached: np.ndarray,
) -> pd.DataFrame:
    """The calls within the spec's days as a trace frame, sorted by time."""
    n_users = spec.users
    horizon_s = spec.days * 86400.0
    keep = (ts >= 0) & (ts < horizon_s)
    idx = np.flatnonzero(keep)
    idx = idx[np.argsort(ts[idx], kind="stable")]
    width = max(2, len(str(n_users - 1)))
    user_names = np.array([f"u{u:0{width}d}" for u in range(n_users)], dtype=object)
    sess_names = np.array(
        [f"{user_names[u]}-s{i:05d}" for i, u in enumerate(ses.user)], dtype=object
    )
    c_sess = calls.sess
    cols: dict[str, Any] = {
        "timestamp": ts[idx],
        "model": np.array(model_names, dtype=object)[c_model[idx]],
        "input_tokens": inp[idx],
        "output_tokens": out[idx],
        "user": user_names[ses.user[c_sess[idx]]],
        "session": sess_names[c_sess[idx]],
        "cached_tokens": cached[idx],
        "served_by": np.full(len(idx), "", dtype=object),
        "substituted": np.zeros(len(idx), dtype=np.int64),
    }
    return pd.DataFrame({c: pd.Series(cols[c], dtype=DTYPES[c]) for c in COLUMNS})
