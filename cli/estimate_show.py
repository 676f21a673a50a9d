"""What `planner estimate` prints of one scenario: its figures as a table, which of them a
calibration moved, and how its TTFT is meant."""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.cli.common import console

if TYPE_CHECKING:
    from planner.app.estimate import Estimate


def print_estimate(r: Estimate) -> None:
    """One scenario's estimate as a table, what was calibrated and how TTFT is meant."""
    from rich.table import Table

    t = Table(title=f"{r.model} {r.quantization} on {r.tp} x {r.gpu}", show_header=False)
    t.add_column("quantity")
    t.add_column("value", justify="right")

    def show(x: float | None, fmt: str, unit: str) -> str:
        return "n/a (does not fit)" if x is None else f"{format(x, fmt)} {unit}"

    t.add_row("weights per GPU", f"{r.weights_gib_per_gpu:.2f} GiB")
    t.add_row("KV bytes per token", f"{r.kv_bytes_per_token:,.0f}")
    t.add_row("max KV tokens", f"{r.max_kv_tokens:,}")
    t.add_row("max_num_seqs / batched tokens", f"{r.max_num_seqs} / {r.max_num_batched_tokens}")
    t.add_row("TTFT (mean, see below)", show(r.ttft_s, ".3f", "s"))
    t.add_row("TPOT (mean)", show(r.tpot_s, ".4f", "s"))
    t.add_row("output tokens/s", f"{r.output_tokens_per_s:.1f}")
    t.add_row("linear layers' rate from", r.source)
    t.add_row("cold start", f"{r.cold_start_s:.1f} s")
    t.add_row("wake from host RAM", f"{r.wake_host_s:.2f} s")
    t.add_row("wake from disk", f"{r.wake_disk_s:.1f} s")
    console.print(t)
    fitted = {k: v for k, v in r.calibration.items() if v["calibrated"]}
    if fitted:  # which figures a profile's calibration moved, and from what
        first = next(iter(fitted.values()))
        console.print(f"calibrated: {', '.join(fitted)} ({first['source']})", highlight=False)
    else:
        console.print("calibrated: none (the GPU generation's defaults)", highlight=False)
    if r.ttft_s is not None:
        n = r.concurrency
        console.print(
            f"TTFT: {n} client{'s' if n != 1 else ''} sending requests back to back; "
            f"{r.burst_share:.0%} of the requests arrive together with the others' and queue "
            "behind their prompts (as in a serving benchmark), the rest find the engine decoding.",
            highlight=False,
        )
    if not r.fits:
        console.print(
            "[yellow]the KV cache cannot hold one max-model-len sequence: raise --tp, quantize, "
            "or lower --max-model-len[/]"
        )
