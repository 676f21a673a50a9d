"""Perf model vs 914 measured vLLM serving runs, leave one group out (issue 12).

Data: bench/data/aiconfigurator/silicon_vllm_agg.csv (see bench/data/SOURCES.md): mean TTFT
and mean TPOT of closed-loop benchmarks (`batch_size` clients, fixed input/output lengths)
of MiniMax-M2.5, Kimi-K2.5, Llama-3.1-70B and gpt-oss-120b on B200, B300, H100 and H200.

The prediction is the planner's own: `instance_perf` with vLLM's defaults for the GPU (the
runs record no engine flags; an fp8 KV cache for the fp8 and fp4 checkpoints, which some
runs need to hold their batch: serving.kv_dtype) and `closed_loop`, the clients' closed
loop. Linear layers run at the measured GEMM tables' rates where they cover the GPU (H200);
Blackwell's take the H200 table's dependence on shape at their fitted level. Constants that
per-operator tables or published kernel measurements give stay as shipped (Hopper's GEMM
and attention efficiencies, kernel floors, activation quantization, all-reduce latency, the
W4A16 kernels' read and multiply rates per SM: optimizer/perf/calib.py). Ten constants are
fitted, eight shared by every GPU and model: bandwidth efficiency, the routed experts' read
rate over it, step overhead, the routed-expert GEMMs' share of a dense GEMM's rate, the cost per decoder layer of a step too
large for vLLM's CUDA graphs, the request overhead (fixed and per prompt token), and the
share of requests that arrive in a burst with the other clients' (fixed-length clients stay
partly in step, as in a first round); and Blackwell's fp8/fp4 GEMM efficiency and its
block-scaled fp8 GEMMs' fixed cost (no per-op table; Blackwell rows only). A fit minimizes
the mean |log ratio|, each row's clipped at 0.2 (serving.CLIP). Every fit leaves out the
group it predicts:

- leave one model out: fit on the other three models' rows, score the held-out model's;
- leave one system out: fit on the other GPUs' rows, score the held-out GPU's.

The alternative: a hand roofline (TPOT = a step's fixed time + the bytes a decode step reads /
bandwidth; TTFT = a request's fixed time + prompt FLOPs / peak), its four constants fitted
on the same training folds with the same loss.
Targets (issue 31): median absolute error TPOT <= 8% and TTFT <= 15% over all expressible
rows, and no (model, system) group worse than 20% TPOT, under both splits. A few minutes.
Small fp8 models (<= 10B parameters, fp8; issue 44) are reported apart, under both splits:
the bundled runs hold none (`small_fp8_rows=0`); `--csv FILE` scores another file in the
same layout (models resolved from their hub ids as `planner profile import` does).

    python bench/perfmodel_vs_serving.py [--csv FILE]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

from result import cells
from serving import (
    ATTN_BLACKWELL,
    BURST,
    CHAIN,
    CONFIG,
    CSV,
    FP8_BLOCK_BLACKWELL,
    LOWP_BLACKWELL,
    errors,
    fit_model,
    fit_roofline,
    load_rows,
    predict,
    roofline,
    roofline_parts,
)

TPOT_TARGET = 0.08
TTFT_TARGET = 0.15
GROUP_TPOT_TARGET = 0.20
START = {
    "bandwidth_efficiency": 0.8,
    "step_overhead_s": 1e-4,
    "moe_compute_efficiency": 0.5,
    "eager_layer_s": 3e-4,
    "prefill_overhead_s": 0.02,
    "prompt_s_per_token": 2e-6,
    BURST: 0.13,
    CHAIN: 0.05,
    LOWP_BLACKWELL: 0.42,
    FP8_BLOCK_BLACKWELL: 16e-6,
    "expert_bandwidth_ratio": 1.0,  # Calib.expert_bandwidth_ratio (see the note below)
    ATTN_BLACKWELL: 0.48,
}
BOUNDS = {
    "bandwidth_efficiency": (0.3, 1.0),
    "step_overhead_s": (1e-5, 1e-2),
    "moe_compute_efficiency": (0.05, 1.0),
    "eager_layer_s": (1e-6, 3e-3),
    "prefill_overhead_s": (1e-3, 0.2),
    "prompt_s_per_token": (1e-8, 2e-5),
    BURST: (0.01, 1.0),
    CHAIN: (0.001, 0.9),
    LOWP_BLACKWELL: (0.1, 1.0),
    FP8_BLOCK_BLACKWELL: (1e-6, 3e-5),
    "expert_bandwidth_ratio": (0.3, 3.0),
    ATTN_BLACKWELL: (0.2, 1.0),
}
# Tried in this harness and dropped (each constant fitted with the others, scored leave one
# model out / leave one GPU out: TTFT, TPOT, worst group TPOT; without it 0.145 0.080 0.110 /
# 0.134 0.073 0.112):
# - an API-server cost per concurrent stream added to TTFT (0.54 ms/stream fitted):
#   0.152 0.077 0.107 / 0.134 0.074 0.126;
# - routed-expert GEMM compute slowing as TP narrows each expert, / (1 + w / (N_moe / TP)):
#   0.174 0.078 0.112 (leave one model out only);
# - the same on the routed experts' reads: 0.146 0.084 0.151 / 0.153 0.073 0.111;
# - a fixed cost per touched expert and layer: 0.166 0.095 0.149 / 0.148 0.082 0.132;
# - NVLink all-reduce latency fitted (the MoE rows pull it up, then Llama TP8 runs 15% slow):
#   0.148 0.085 0.114 / 0.133 0.072 0.120;
# - the per-stream cost inside the request's delay to the engine (a running step absorbs it):
#   0.150 0.082 0.135 (leave one model out only);
# - NVLink all-reduce efficiency fitted (0.34-0.49 in every fold, below the shipped 0.65):
#   0.155 0.075 0.111 / 0.139 0.075 0.122;
# - decode attention's work units charged per sequence in the step (Calib.attn_unit_cycles,
#   from the per-op tables, not fitted): 0.156 0.080 0.114 / 0.134 0.072 0.108 (the folds
#   raise burst_share and the request overhead: Llama's TTFT 14.8% -> 18.0% held out);
# - a fixed cost per MoE layer and step (4-14 us fitted): 0.148 0.082 0.136 / 0.136 0.070
#   0.139;
# - a cost per token and MoE layer that TP does not split (routing, permutes; 2-9e-8 s
#   fitted), for the MoE prefills' TP-independent part: 0.170 0.089 0.143 / 0.169 0.075 0.116;
# - routing concentrated (distinct experts of t tokens as of t^g uniformly routed ones, g
#   0.88-1.0 fitted): 0.152 0.083 0.165 / 0.139 0.076 0.115;
# - one factor on every GEMM and attention efficiency (0.95-1.06 fitted): 0.148 0.080
#   0.115 / 0.137 0.071 0.115.
# Kept: the routed experts' read rate fitted apart from the dense weights'
# (expert_bandwidth_ratio, 1.12-1.44 in every fold; bandwidth 0.79-0.96): 0.144 0.073 0.093
# / 0.135 0.068 0.117 (bench/perfmodel_calibrated.py: 13.7%, 6.7%, uncalibrated 13.5%,
# 6.5%, against 13.6%, 6.7% and 13.4%, 7.1% without it). Tried on top of it and dropped
# (the figures with it: 0.144 0.073 0.093 / 0.135 0.068 0.117):
# - NVLink all-reduce latency fitted (4.2-12 us): 0.147 0.075 0.111 / 0.134 0.071 0.122;
# - Blackwell's fp8-per-tensor / fp4 activation quantization fitted (5.6-10 us against
#   Hopper's 7 us from its tables): 0.148 0.083 0.118 / 0.132 0.076 0.120 (pass=0);
# - none on Blackwell's per-tensor fp8 GEMMs (vLLM fusing the quantization into the norm
#   and activation kernels; Llama-3.1-70B fp8 on B200 runs 9-16% slow at TP 2-8 and 2-4
#   concurrency): 0.163 0.075 0.177 / 0.138 0.072 0.119 (pass=0);
# - the kernel floor fitted (3.3-3.7 us against aiconfigurator's 3 us): 0.148 0.076 0.106
#   / 0.132 0.071 0.128;
# - decode attention's KV read rate fitted (0.55-0.88 of the weights', against the per-op
#   tables' 0.62 on Hopper): 0.147 0.069 0.089 / 0.136 0.073 0.101 (TTFT worse in both
#   splits, TPOT worse leaving a GPU out).
# Not tried: a bandwidth that falls as TP shrinks each GPU's GEMVs. With the ratio fitted,
# Llama-3.1-70B's decode (concurrency <= 8, B200, all rows' fit) runs -1%, +9%, +11%, +16%
# (fp8) and -7%, -1%, +4%, +5% (nvfp4) at TP 1, 2, 4, 8: already too slow at high TP, which
# that term would make slower; what is left there is a fixed part too large for Llama and
# too small for gpt-oss-120b (+9% at TP1, -4% at TP8).
# Kept (perf model, no constant): MiniMax-M2's q/k norm over all heads all-reduces its
# variance in every layer under TP, with a kernel before and after it
# (ModelArch.tp_norm_allreduces): 0.148 0.072 0.114 / 0.143 0.058 0.119 against 0.144 0.073
# 0.093 / 0.135 0.068 0.117 (TPOT better, TTFT worse in both splits; all rows' fit:
# bandwidth 0.936, expert read ratio 1.15; bench/perfmodel_calibrated.py 13.4%, 5.5%). With
# only the all-reduce: 0.148 0.069 0.111 / 0.131 0.066 0.124 (calibrated 13.6%, 6.4%); with
# four kernels: 0.146 0.071 0.130 / 0.141 0.059 0.120 (14.3%, 5.4%). Tried on top of it and
# dropped:
# - a fixed cost per W4A16 (Marlin) grouped expert GEMM (14 us fitted; Kimi-K2.5 int4 decode
#   runs ~2 ms a step slow at 4-8 clients on B200 and H200): 0.151 0.071 0.115 / 0.137 0.055
#   0.119 (pass=0; calibrated 13.0%, 5.3%);
# - that and the eager cost per kernel launched rather than per layer (attention, MLP or MoE
#   and all-reduce kernels counted; MLA layers launch 2.4x a Llama layer's): 0.129 0.068 0.124
#   / 0.141 0.060 0.123, but calibrated 14.5%, 5.4% (14.4%, 5.4% without the W4A16 cost);
# - that and the all-reduce fused with the RMSNorm after it (vLLM's default at TP > 1 on
#   Hopper and Blackwell: one kernel floor less per all-reduce): calibrated 13.8%, 6.5%; also
#   without the per-tensor fp8 quantization after it: 13.8%, 7.4% (the leave-one-GPU-out bases
#   of the B200 rows hold no dense model).
# Dropped in sample (all rows' fit, TTFT, TPOT; with the norm all-reduce 12.4%, 5.7%): eager
# steps as the larger of the CPU's launches and the GPU's work (13.9%, 6.2%); routed-expert
# rows padded to 64/128-row tiles per expert (13.2%, 5.6% / 13.2%, 6.8%); a share of clients
# arriving in convoys (those whose prompts shared a step), prefilled together (12.3%, 6.0%);
# the first round's burst persisting less the more of a request's cycle it spread the clients
# over (16.3%, 6.5%); gpt-oss-120b's MXFP4 experts at the bf16 rate (15.2%, 6.0%: its
# 8192-token TTFTs 60-200% slow, so these runs' experts multiplied near the fp4 rate).
# The TTFT structure left: at 32+ clients the 1024-token prompts need a burst share of ~0.2,
# the 8192-token ones ~0.12 (every GPU and model). Two shares split at 4096 prompt tokens (a
# description of the harness, no mechanism found; not kept): 0.145 0.072 0.114 / 0.131 0.059
# 0.115, calibrated 12.8%, 5.5% (in sample 10.9%, 5.4%); with the eager cost per kernel too:
# calibrated 12.4%, 5.9% (in sample 9.8%, 5.5%).
# Kept (the mechanism): after the first round the clients keep its order. The prompts that
# shared a first-round step decode in the same steps and finish together, one step after the
# group before them, so in later rounds each group arrives while the group before it is
# prefilled and waits that step out (closedloop._chained_ttft, weight chain_share, the burst
# share then of the other requests; the simulator's deterministic replay of a burst gives
# the same second round: bench/simulator_vs_estimate.py). A chain costs about two full steps
# whatever the prompt: for 1024-token prompts (16 to a 16384-token step) that is most of
# their short first round, for 8192-token ones (2 to a step) a small part of theirs, which
# is the burst share's dependence on prompt length. Fitted: burst_share 0.129 (the first
# round, about 1 in 8 requests), chain_share 0.076 (all rows; 0.13-0.15 and 0.06-0.09 in
# every fold): 0.118 0.069 0.124 / 0.123 0.060 0.115 against 0.148 0.072 0.114 / 0.143 0.058
# 0.119 (in sample TTFT 12.4% -> 10.8%, TPOT 5.7% -> 5.6%; bench/perfmodel_calibrated.py
# 12.9%, 5.4% against 13.4%, 5.5%). Tried on top of it and dropped: the later groups falling
# behind where the others' decodes leave a group's step less budget than its prompts need
# (0.117 0.070 0.124 / 0.123 0.059 0.115, calibrated 13.1%, 5.4%); Blackwell's prefill
# attention efficiency fitted without the chain (0.74 against Hopper's tables' 0.48: 0.151
# 0.074 0.117 / 0.141 0.060 0.120, pass=0; calibrated 13.1%, 5.5%); the other groups'
# decodes in a chained group's step (0.118 0.070 0.124 / 0.122 0.059 0.115, calibrated 13.1%,
# 5.3%); groups merging where the request's delay to the engine outlasts a decode step (as
# the simulator's do on L40S/A100), ceil(delay / decode step) groups prefilled as a small
# first round (0.138 0.069 0.124 / 0.132 0.064 0.118, calibrated 13.9%, 6.0%).
# Kept with it: Blackwell's prefill attention efficiency fitted (serving.ATTN_BLACKWELL; no
# per-op table there, FlashAttention 3 is a Hopper kernel): 0.344 on all rows, 0.21-0.37 in
# every fold (traded against blackwell_lowp_efficiency, 0.52-0.70), against Hopper's tables'
# 0.48: 0.116 0.071 0.120 / 0.120 0.062 0.115 (calibrated 12.2%, 5.5%; uncalibrated 12.7%,
# 5.9%), against the chain alone's 0.118 0.069 0.124 / 0.123 0.060 0.115 (12.9%, 5.4%).
# Fitted without the chain it went the other way (0.74 above): what it absorbed there was
# the long prompts' queue.
# Tried on top of it and dropped (bench/perfmodel_calibrated.py loses): the softmax's
# exponentials at the SFU rate NVIDIA publishes (Blackwell Ultra datasheet, "Attention
# acceleration (SFU EX2)": B200 5, B300 10.7 T/s) in series with attention's tensor cores at
# blackwell_attn_efficiency: 0.492 on all rows, 0.341 / 0.342 leaving B200 / B300 out (0.308
# / 0.229 without the exponentials: they explain B300's faster attention), 0.26-0.88 leaving
# one model out: 0.116 0.069 0.121 / 0.111 0.060 0.121 (calibrated 13.7%, 5.5%; uncalibrated
# 11.6%, 5.6%). With that efficiency on the exponentials too (0.38-0.99 in the folds):
# 0.116 0.071 0.122 / 0.104 0.061 0.119 (calibrated 14.5%, 6.3%; uncalibrated 10.7%, 5.9%).
# Small fp8 models (issue 44 item 3, still open): Llama-3.1-8B fp8 on H200 is predicted
# 3.9 ms a step at 1 client, 2.1 ms of it kernel floors. The per-op data we may use does not
# lower them: aiconfigurator's vLLM 0.14 fp8 GEMMs at m = 1 take 11.3 us (1024 x 1024), 16.8
# (4096 x 4096), 18.8 (6144 x 4096) on H200 against 0.2-5.2 us of weight reads (bf16: 4.0
# us at 1024 x 1024, m = 8), what the 3 us floor plus 7 us of quantization give; and the
# rows here need them: Llama-3.1-70B fp8 on B200 at TP8, 4 clients, TPOT 6.3 ms against
# 1.2 ms of reads and 0.7 ms of all-reduces, ~55 us a layer beyond. What runs faster is
# vLLM 0.19's compiled, fully captured decode, which no per-op table times: it needs a small
# model's serving runs (none here). A team's own runs cannot fix it either: the step
# factor of `profile calibrate` moves the 31 us step overhead, not the floors. Letting it
# scale both (Calib.kernel_floor_scale, tried and dropped): bench/perfmodel_calibrated.py
# same model above 8 clients 11.3%, 10.3% -> 11.5%, 8.5% against -> 11.2%, 7.0% without it
# (H200 Kimi-K2.5 TPOT 3.2% -> 21.9%), a held-out model's compute factor kept (Kimi-K2.5 on
# B200 TTFT 9.5% -> 10.7%).


def band(c: pd.Series) -> pd.Series:
    return pd.cut(c, [0, 8, 64, 1 << 30], labels=["1-8", "9-64", ">64"])


def out_of_sample(rows: pd.DataFrame, by: str) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(model predictions, roofline predictions, fit notes), each row predicted by a fit that
    left out its `by` group."""
    model_parts = []
    roof_parts = []
    notes = []
    for held in sorted(rows[by].unique()):
        train, test = rows[rows[by] != held], rows[rows[by] == held]
        t0 = time.perf_counter()
        theta = fit_model(train, START, BOUNDS)
        model_parts.append(errors(test, predict(test.drop_duplicates(CONFIG), theta)))
        roof = fit_roofline(train)
        roof_parts.append(
            errors(test, roofline(roofline_parts(test.drop_duplicates(CONFIG)), roof))
        )
        fitted = ", ".join(f"{k} {v:.3g}" for k, v in theta.items())
        shown = ", ".join(f"{k} {v:.3g}" for k, v in roof.items())
        notes.append(
            f"  without {held}: {fitted}; roofline {shown} "
            f"({len(train)} training rows, {time.perf_counter() - t0:.0f} s)"
        )
        print(notes[-1], flush=True)
    return pd.concat(model_parts), pd.concat(roof_parts), notes


def med(x: pd.Series) -> str:
    return f"{np.median(x):6.1%}" if len(x) else "    - "


def table(j: pd.DataFrame, keys: list[str] | str, title: str) -> None:
    print(f"  {title}")
    for k, g in j.groupby(keys, observed=True):
        name = " ".join(str(x) for x in (k if isinstance(k, tuple) else (k,)))
        print(f"    {name:34} n={len(g):4d}  TTFT {med(g.ttft_err)}  TPOT {med(g.tpot_err)}")


SMALL_PARAMS_B = 10.0  # a "small" model: at most this many billion parameters


def small_fp8(rows: pd.DataFrame) -> pd.Series:
    """Rows of small (<= SMALL_PARAMS_B) fp8 models: the kind users run most."""
    from planner.catalog.models import resolve_arch_name

    size = {m: resolve_arch_name(m).total_params_b for m in rows.model.unique()}
    return (rows.model.map(size) <= SMALL_PARAMS_B) & (rows.quant == "fp8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=CSV, help="serving runs in the bundled layout")
    args = ap.parse_args()
    rows, skipped = load_rows(args.csv)
    total = len(rows) + sum(skipped.values())
    print(
        f"{total} rows; {len(rows)} expressible (TP only); skipped: "
        + ", ".join(f"{n} {r}" for r, n in skipped.items())
    )
    res: dict[str, float] = {}
    ok = True
    for split, by in (("leave one model out", "model"), ("leave one system out", "gpu")):
        print(f"\n{split} (fit on the other groups' rows, score the held-out group's):")
        j, roof, _ = out_of_sample(rows, by)
        j = j.assign(band=band(j.c))
        tag = "lomo" if by == "model" else "loso"
        t_ttft, t_tpot = np.median(j.ttft_err), np.median(j.tpot_err)
        print(
            f"  model:    median abs error TTFT {t_ttft:.1%}, TPOT {t_tpot:.1%} over {len(j)} rows"
        )
        print(
            f"  roofline: median abs error TTFT {np.median(roof.ttft_err):.1%}, TPOT {np.median(roof.tpot_err):.1%}"
        )
        table(j, ["model", "gpu"], "per (model, system):")
        table(j, "band", "per concurrency band:")
        table(j, "quant", "per precision:")
        small = j[small_fp8(j)]
        print(
            f"  small fp8 models (<= {SMALL_PARAMS_B:g}B): n={len(small)}  TTFT "
            f"{med(small.ttft_err)}  TPOT {med(small.tpot_err)}"
        )
        if len(small):
            res[f"{tag}_small_fp8_tpot"] = np.median(small.tpot_err)
            res[f"{tag}_small_fp8_ttft"] = np.median(small.ttft_err)
        worst = j.groupby(["model", "gpu"]).tpot_err.median()
        res.update(
            {
                f"{tag}_ttft": t_ttft,
                f"{tag}_tpot": t_tpot,
                f"{tag}_worst_group_tpot": worst.max(),
                f"{tag}_roofline_ttft": np.median(roof.ttft_err),
                f"{tag}_roofline_tpot": np.median(roof.tpot_err),
            }
        )
        ok &= t_tpot <= TPOT_TARGET and t_ttft <= TTFT_TARGET and worst.max() <= GROUP_TPOT_TARGET
        print(f"  worst (model, system) TPOT: {worst.idxmax()} {worst.max():.1%}")
    print("\nall rows (the source of the fitted defaults in optimizer/perf/calib.py; not scored):")
    theta = fit_model(rows, START, BOUNDS)
    print("  " + ", ".join(f"{k} {v:.3g}" for k, v in theta.items()))
    n_small = int(small_fp8(rows).sum())
    fields = res | {"rows": len(rows), "skipped": sum(skipped.values()), "small_fp8_rows": n_small}
    print(f"RESULT {cells(ok, fields)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
