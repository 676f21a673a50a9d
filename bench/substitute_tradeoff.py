"""What declared stand-ins buy (issue 17): warm GPU memory vs switch P95 vs quality cost, on
each example cluster (`lab16`, `edge6`) and a third of the bench's own (`mixed8`: 2x A100-80GB,
4x RTX-4090, 2x L40S on three nodes, lab16's models and SLO, 8 developers; issue 30 item 8),
with and without substitutes declared for two models.

Declarations (`DECLARED`): written into a copy of the example's models.yaml in a temporary
folder (the example files stay as they are) and loaded through `planner validate`'s checks.
Each covered model is answered by an awake sibling that holds its context while it wakes
(`substitute_when: always_while_waking`, the wake still happens), at the quality penalty
given there.

Split. Both runs hold back the optimizer's default days (`--held-back week`: Friday and
Sunday of the example's Monday week, seed 0), fit on the other 5 and choose and score their
points on the 2 held back: every figure below is on those held-back days, which the search
never fitted to. (Until issue 30 item 2 the held-back days were the weekend, where stand-ins
cover the most wakes: lab16 and edge6 then met the 20% target on them, 28.4% and 21.5%,
while the next week gave 17.2% and 9.2%; a working day among the held-back days brings the
headline figure down to what the next week shows.)

Without substitutes the optimizer runs twice: with its defaults, and with every lazy
instance sleeping as soon as the covered ones do in the run with substitutes
(`covered_idle_sleep_s`, points named `...@300s`), so that what sleeping sooner alone buys
is on the side without stand-ins too; the comparison takes the best of both.

Target (issue 17 "Done when"), per cluster: some point of the run with substitutes (not a
`from-<baseline>` point, which both runs share) has switch P95 <= 1 s and warm GiB at least
20% below the best point without substitutes at the same attainment. "Same attainment": the
comparison takes every point of the run without substitutes whose attainment is no more than
0.01 below the new point's and whose switch P95 is <= 1 s too (when none is that fast: every
point within the attainment), and the least warm GiB among them; the new point's attainment
must also meet the SLO's target. Exit 1 when a cluster misses it. The pair compared is
also scored on the next week (seed 1, same spec), which nothing here was chosen on: the
declarations and `covered_idle_sleep_s` were picked while reading the held-back days, so
that week is the clean check (printed, `*_unseen_*` in the RESULT line, not a target). `--quick`: 8 evaluations.
Writes the curve as a PNG (`--png`, default substitute_tradeoff.png in the temp folder).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

from lab16 import example, example_dir

from planner.app import files as inputs
from planner.optimizer import scoring
from planner.optimizer.config import OptimizeConfig
from planner.optimizer.search import SearchInputs, optimize
from planner.optimizer.sim.simulator import simulate
from planner.schemas import load_models

EXAMPLES = ("lab16", "edge6", "mixed8")  # mixed8: bench/data/substitute/mixed8 (issue 30)
# cluster -> covered model -> (stand-in, quality penalty): a smaller sibling that is awake
# most of the day answers while the covered model wakes.
DECLARED = {
    "lab16": {"reviewer-14b": ("planner-7b", 0.10), "reasoner-30b": ("coder-32b", 0.08)},
    "edge6": {"reviewer-14b": ("coder-32b", 0.05), "reasoner-30b": ("planner-8b", 0.05)},
    # large models covered by an 8B one, on a mix of datacenter and consumer cards
    "mixed8": {"reasoner-30b": ("summarizer-8b", 0.10), "coder-32b": ("summarizer-8b", 0.10)},
}
SWITCH_S = 1.0  # switch P95 the new point must hold, s
SAVING = 0.20  # warm GiB below the best point without substitutes
SAME_ATTAINMENT = 0.01  # attainment within this counts as the same


def declared_models(name: str, folder: Path) -> Path:
    """A copy of the example's models.yaml with `DECLARED[name]` added, in `folder`."""
    data = yaml.safe_load((example_dir(name) / "models.yaml").read_text())
    for m in data["models"]:
        if m["name"] in DECLARED[name]:
            sub, penalty = DECLARED[name][m["name"]]
            m["substitutes"] = [{"model": sub, "quality_penalty": penalty}]
            m["substitute_when"] = "always_while_waking"
    out = folder / f"{name}.models.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def curve(res, suffix: str = "") -> list[dict]:
    """The run's points with their held-back figures (and the point and its perfs)."""
    out = []
    for p in res.points:
        m = res.metrics[p.name]
        out.append(
            {
                "point": p.name + suffix,
                "plan": (p, res.perfs[p.name]),
                "attainment": m.slo_attainment,
                "switch_p95_s": m.switch_p95_s,
                "warm_gib": m.warm_gpu_gib,
                "quality_cost": m.quality_cost,
                "substituted_share": m.substituted_share,
            }
        )
    return out


def best_without(base: list[dict], attainment: float) -> dict | None:
    """The least-warm point without substitutes at the same attainment (module docstring)."""
    same = [r for r in base if r["attainment"] >= attainment - SAME_ATTAINMENT]
    fast = [r for r in same if r["switch_p95_s"] <= SWITCH_S + 1e-9]
    pool = fast or same
    return min(pool, key=lambda r: r["warm_gib"]) if pool else None


def _print(title: str, rows: list[dict]) -> None:
    print(title)
    print(f"{'point':<20}{'attain':>8}{'switch95 s':>12}{'warm GiB':>10}{'quality':>9}{'subst':>7}")
    for r in rows:
        print(
            f"{r['point']:<20}{r['attainment']:>8.3f}{r['switch_p95_s']:>12.2f}"
            f"{r['warm_gib']:>10.1f}{r['quality_cost']:>9.4f}{r['substituted_share']:>7.3f}"
        )


def run(name: str, evals: int, folder: Path) -> tuple[dict[str, str], list, list]:
    cl, ms, sl, week = example(name, seed=0)
    ms_sub = load_models(declared_models(name, folder))
    cfg = OptimizeConfig(evals=evals)
    res0 = optimize(SearchInputs(cl, ms, sl, week, cfg))
    # the shorter idle sleep the covered models get, for every model and without stand-ins:
    # what sleeping sooner alone buys
    short = cfg.model_copy(update={"idle_sleep_s": cfg.covered_idle_sleep_s})
    base = curve(res0) + [
        r
        for r in curve(optimize(SearchInputs(cl, ms, sl, week, short)), f"@{short.idle_sleep_s:g}s")
        if not r["point"].startswith("from-")  # the same baselines
    ]
    res1 = optimize(SearchInputs(cl, ms_sub, sl, week, cfg))
    subs = curve(res1)
    decl = ", ".join(f"{m} <- {s} (penalty {p})" for m, (s, p) in DECLARED[name].items())
    print(
        f"\n== {name}: fit on {res0.fit_requests} requests, scored on the {res0.validate_days} "
        f"held-back days ({res0.held_requests} requests); stand-ins: {decl}"
    )
    _print("-- without substitutes", base)
    _print("-- with substitutes", subs)
    best = None  # (saving, new point, compared point)
    for r in subs:
        if r["point"].startswith("from-") or r["switch_p95_s"] > SWITCH_S + 1e-9:
            continue
        if r["attainment"] < sl.attainment - 1e-9:
            continue
        b = best_without(base, r["attainment"])
        if b is None:
            continue
        saving = 1.0 - r["warm_gib"] / b["warm_gib"]
        if best is None or saving > best[0]:
            best = (saving, r, b)
    out = {f"{name}_met": "False"}
    if best is None:
        print(f"no point with substitutes has switch P95 <= {SWITCH_S} s at the target attainment")
        return out, base, subs
    saving, r, b = best
    met = saving >= SAVING - 1e-9
    print(
        f"best new point {r['point']}: {r['warm_gib']:.1f} GiB, switch P95 "
        f"{r['switch_p95_s']:.2f} s, attainment {r['attainment']:.3f}, quality cost "
        f"{r['quality_cost']:.4f} ({r['substituted_share']:.1%} of requests by a stand-in); "
        f"without substitutes {b['point']}: {b['warm_gib']:.1f} GiB, switch P95 "
        f"{b['switch_p95_s']:.2f} s, attainment {b['attainment']:.3f}: "
        f"{saving:.1%} less warm memory (target {SAVING:.0%})"
    )
    # The same two points on a week nobody looked at (seed 1): the declarations and
    # covered_idle_sleep_s were chosen while reading the held-back days above.
    req = scoring.requests(example(name, seed=1)[3], ms)
    u_new, u_base = (
        simulate(*row["plan"], req, sl, model_names=ms.names).to_metrics() for row in (r, b)
    )
    u_saving = 1.0 - u_new["warm_gpu_gib"] / u_base["warm_gpu_gib"]
    print(
        f"unseen week (seed 1, {len(req)} requests): {r['point']} {u_new['warm_gpu_gib']:.1f} "
        f"GiB, switch P95 {u_new['switch_p95_s']:.2f} s, attainment "
        f"{u_new['slo_attainment']:.3f}, quality cost {u_new['quality_cost']:.4f}; "
        f"{b['point']} {u_base['warm_gpu_gib']:.1f} GiB, switch P95 "
        f"{u_base['switch_p95_s']:.2f} s, attainment {u_base['slo_attainment']:.3f}: "
        f"{u_saving:.1%} less warm memory"
    )
    out = {
        f"{name}_warm_gib": f"{r['warm_gib']:.1f}",
        f"{name}_base_warm_gib": f"{b['warm_gib']:.1f}",
        f"{name}_saving": f"{saving:.3f}",
        f"{name}_switch_p95_s": f"{r['switch_p95_s']:.2f}",
        f"{name}_quality_cost": f"{r['quality_cost']:.4f}",
        f"{name}_unseen_saving": f"{u_saving:.3f}",
        f"{name}_unseen_switch_p95_s": f"{u_new['switch_p95_s']:.2f}",
        f"{name}_met": str(met),
    }
    return out, base, subs


def plot(curves: dict[str, tuple[list, list]], png: Path) -> None:
    """Warm GiB vs switch P95 per cluster, the points with substitutes coloured by their
    quality cost."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(6 * len(curves), 4.5), squeeze=False)
    for ax, (name, (base, subs)) in zip(axes[0], curves.items(), strict=True):
        # the from-<baseline> points both runs share sit far right: printed, not drawn
        base = [r for r in base if not r["point"].startswith("from-")]
        subs = [r for r in subs if not r["point"].startswith("from-")]
        ax.scatter(
            [r["warm_gib"] for r in base],
            [r["switch_p95_s"] for r in base],
            marker="s",
            facecolors="none",
            edgecolors="grey",
            label="without substitutes",
        )
        sc = ax.scatter(
            [r["warm_gib"] for r in subs],
            [r["switch_p95_s"] for r in subs],
            c=[r["quality_cost"] for r in subs],
            cmap="viridis",
            marker="o",
            label="with substitutes",
        )
        for r in subs:
            ax.annotate(r["point"], (r["warm_gib"], r["switch_p95_s"]), fontsize=7)
        fig.colorbar(sc, ax=ax, label="quality cost")
        ax.axhline(SWITCH_S, color="red", lw=0.8, ls="--")
        ax.set_xlabel("warm GPU memory, GiB (time average)")
        ax.set_ylabel("switch P95, s")
        ax.set_title(f"{name} (held-back days)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="8 evaluations per run")
    ap.add_argument("--png", type=Path, default=None, help="where to write the curve")
    args = ap.parse_args()
    inputs.silence_solver_banner()
    evals = 8 if args.quick else OptimizeConfig().evals
    out: dict[str, str] = {}
    curves = {}
    with tempfile.TemporaryDirectory(prefix="substitute-tradeoff-") as tmp:
        folder = Path(tmp)
        for name in EXAMPLES:
            res, base, subs = run(name, evals, folder)
            out.update(res)
            curves[name] = (base, subs)
        png = args.png or Path(tempfile.gettempdir()) / "substitute_tradeoff.png"
        plot(curves, png)
    print(f"curve: {png}")
    met = all(out[f"{n}_met"] == "True" for n in EXAMPLES)
    out["met"] = str(met)
    print("RESULT " + " ".join(f"{k}={v}" for k, v in out.items()))
    sys.exit(0 if met else 1)


if __name__ == "__main__":
    main()
