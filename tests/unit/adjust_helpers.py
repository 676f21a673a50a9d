"""Shared builders of the adjust tests: a hand-built 2-point plan, synthetic traces, and the
gateway's request log written from a trace.

Two models of the lab16 catalog (planner-7b, coder-32b) on one node with two L40S:
point `a-hot` keeps planner-7b awake and coder-32b on the host tier, `b-hot` the reverse.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import yaml

from planner.adjuster.gateway import LOG_COLUMNS, RequestLog
from planner.optimizer.point_metrics import PointMetrics
from planner.optimizer.sim.perfs import perfs_for_point
from planner.optimizer.workload.characterize import summarize
from planner.optimizer.workload.synth import synth
from planner.optimizer.workload.synth_spec import SynthSpec
from planner.schemas import load_models
from planner.schemas.cluster import Cluster
from planner.schemas.plan import Plan
from planner.schemas.slo import Slo

ROOT = Path(__file__).resolve().parents[2]
MODELS_FILE = ROOT / "plans" / "examples" / "lab16" / "models.yaml"
A, B = "planner-7b", "coder-32b"

CLUSTER = {
    "kind": "cluster",
    "version": 1,
    "name": "adjust-test",
    "nodes": [
        {
            "name": "n",
            "cpu_memory_gib": 256,
            "disk_read_gbps": 3.0,
            "gpus": [{"type": "L40S", "count": 2}],
        }
    ],
}
SLO = {
    "kind": "slo",
    "version": 1,
    "default": {"ttft_p95_s": 5.0, "tpot_p95_s": 0.2, "switch_p95_s": 30.0},
    "attainment": 0.9,
}


def _inst(model: str, gpu: int, tier: str, port: int) -> dict:
    return {
        "id": f"{model}-0",
        "model": model,
        "variant": "awq",
        "node": "n",
        "gpus": [gpu],
        "tp": 1,
        "tier": tier,
        "port": port,
        "memory_gib": {"weights": 18.0 if model == B else 5.2, "kv": 20.0, "overhead": 1.5},
        "engine": {"max_model_len": 32768, "max_num_seqs": 32, "quantization": "awq"},
    }


def _two_points(selected: str, workload_summary: dict | None, points: dict) -> Plan:
    return Plan.model_validate(
        {
            "selected": selected,
            "workload_summary": workload_summary or {},
            "search": {"seed": 0},
            "points": [{"name": name, "instances": insts} for name, insts in points.items()],
        }
    )


def plan(workload_summary: dict | None = None, selected: str = "a-hot") -> Plan:
    """The 2-point plan (optionally with a drift reference)."""
    return _two_points(
        selected,
        workload_summary,
        {
            "a-hot": [_inst(A, 0, "gpu", 8100), _inst(B, 1, "host", 8101)],
            "b-hot": [_inst(B, 0, "gpu", 8101), _inst(A, 1, "host", 8100)],
        },
    )


def shared_split_plan(workload_summary: dict | None = None) -> Plan:
    """`shared`: both models on the host tier of GPU 0 (they time-share it, one awake at a
    time); `split`: each awake on its own GPU (no switch, twice the warm memory)."""
    return _two_points(
        "shared",
        workload_summary,
        {
            "shared": [_inst(A, 0, "host", 8100), _inst(B, 0, "host", 8101)],
            "split": [_inst(A, 0, "gpu", 8100), _inst(B, 1, "gpu", 8101)],
        },
    )


def write_inputs(tmp_path: Path, p: Plan) -> str:
    """cluster.yaml, slo.yaml and plan.yaml (with its `inputs`) in tmp_path; the plan's path."""
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    (tmp_path / "slo.yaml").write_text(yaml.safe_dump(SLO))
    # the plan serves A and B: a models file of those two (a plan serves every model of its file)
    lab = yaml.safe_load(MODELS_FILE.read_text())
    lab["models"] = [m for m in lab["models"] if m["name"] in (A, B)]
    (tmp_path / "models.yaml").write_text(yaml.safe_dump(lab))
    data = p.model_dump(mode="json")
    data["inputs"] = {
        "cluster": {"path": "cluster.yaml"},
        "models": {"path": "models.yaml"},
        "slo": {"path": "slo.yaml"},
    }
    out = tmp_path / "plan.yaml"
    out.write_text(yaml.safe_dump(data))
    return str(out)


def adoption_trace(days: int = 2, adoption_day: int = 1, seed: int = 0) -> pd.DataFrame:
    """Every role calls planner-7b except the reviewer role, adopted on `adoption_day` (coder-32b)."""
    base = SynthSpec(
        users=6, days=days, adopted_role="reviewer", adoption_day=adoption_day, switch_role=None
    )
    roles = {
        r: rs.model_copy(update={"model": B if r == "reviewer" else A})
        for r, rs in base.roles.items()
    }
    return synth(base.model_copy(update={"roles": roles}), seed=seed)


def cluster() -> Cluster:
    return Cluster.model_validate(CLUSTER)


def models():
    return load_models(MODELS_FILE)


def slo() -> Slo:
    return Slo.model_validate(SLO)


def perfs(p: Plan) -> dict:
    cl, ms = cluster(), models()
    return {pt.name: perfs_for_point(pt, cl, ms) for pt in p.points}


def spec(days: int, *, hot: str = A, stationary: bool = False) -> SynthSpec:
    """A small team whose every role calls `hot` except the reviewer role (the other model)."""
    cold = B if hot == A else A
    base = SynthSpec(users=6, days=days, stationary=stationary, adopted_role=None, switch_role=None)
    roles = {
        r: rs.model_copy(update={"model": cold if r == "reviewer" else hot})
        for r, rs in base.roles.items()
    }
    return base.model_copy(update={"roles": roles})


def flipping_trace(days_before: int = 2, days_after: int = 1, seed: int = 0) -> pd.DataFrame:
    """`days_before` days mostly planner-7b, then `days_after` days mostly coder-32b."""
    t1 = synth(spec(days_before, hot=A), seed=seed)
    t2 = synth(spec(days_after, hot=B), seed=seed + 1)
    t2 = t2.assign(timestamp=t2["timestamp"] + days_before * 86400.0)
    t2 = t2.assign(session="late-" + t2["session"].astype(str))
    return (
        pd.concat([t1, t2], ignore_index=True)
        .sort_values("timestamp", kind="stable")
        .reset_index(drop=True)
    )


def reference(df: pd.DataFrame) -> dict:
    s = summarize(df)
    return s.model_dump(mode="json") if hasattr(s, "model_dump") else dict(s)


def window(df: pd.DataFrame, start_s: float, length_s: float = 3600.0) -> pd.DataFrame:
    ts = df["timestamp"]
    return df[(ts >= start_s) & (ts < start_s + length_s)].reset_index(drop=True)


def mix_scorer(point, win: pd.DataFrame) -> PointMetrics:
    """A stand-in simulator: a point pays 20 s of switch P95 per unit share of its cold model
    (no per-request waits: its wakes stand in for them)."""
    hot = A if point.name == "a-hot" else B
    n = len(win)
    cold = int((win["model"].astype(str) != hot).sum()) if n else 0
    cold_share = cold / n if n else 0.0
    return PointMetrics(
        slo_attainment=0.99,
        ttft_p95_s=1.0,
        tpot_p95_s=0.05,
        switch_p95_s=20.0 * cold_share,
        switch_count=int(cold_share * n),
        warm_gpu_gib=30.0,
        gpus_used=2,
        requests=n,
    )


def failing_scorer(point, win: pd.DataFrame) -> PointMetrics:
    """Every point misses the SLO."""
    return dataclasses.replace(mix_scorer(point, win), slo_attainment=0.5)


EPOCH0 = 1_699_920_000.0  # a UTC midnight: the hour of day survives the shift


def write_log(state_dir, df, shift_s: float) -> int:
    """The trace's rows as the gateway logs them (timestamps + `shift_s`)."""
    log = RequestLog(state_dir / "requests.sqlite")
    for r in df.itertuples():
        row = dict(
            timestamp=r.timestamp + shift_s,
            user=r.user,
            session=r.session,
            model=r.model,
            input_tokens=r.input_tokens,
            output_tokens=r.output_tokens,
            cached_tokens=r.cached_tokens,
            ttft_s=0.1,
            latency_s=1.0,
            switch_wait_s=0.0,
            status=200,
            instance=f"{r.model}-0",
            served_by=r.model,
            substituted=0,
        )
        log.add(tuple(row[c] for c in LOG_COLUMNS))
    log.close()
    return len(df)


def adoption_plan(days: int = 2, adoption_day: int = 1) -> tuple[pd.DataFrame, Plan]:
    """The adoption trace, and the shared/split plan made on its day 0 (only planner-7b)."""
    tr = adoption_trace(days=days, adoption_day=adoption_day)
    return tr, shared_split_plan(reference(tr[tr["timestamp"] < 86400.0]))
