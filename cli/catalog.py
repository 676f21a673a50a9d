"""`planner catalog gpus|models`: the built-in GPU and model catalogs."""

from __future__ import annotations

import typer

from planner.cli.common import JsonOpt, console, print_json


def register(app: typer.Typer) -> None:
    """Add `planner catalog gpus` and `planner catalog models`."""
    sub = typer.Typer(help="Built-in GPU and model catalogs.", no_args_is_help=True)

    @sub.command("gpus")
    def gpus(json_out: JsonOpt = False) -> None:
        """GPU types: memory, bandwidth, tensor rates, links, source."""
        from rich.table import Table

        from planner.catalog.gpus import GPUS

        if json_out:
            print_json([g.model_dump() for g in GPUS.values()])
            return
        t = Table(title="GPU catalog (dense rates)")
        for col in (
            "name",
            "arch",
            "GiB",
            "GB/s",
            "bf16 TF",
            "fp8 TF",
            "int8 TOPS",
            "PCIe",
            "NVLink GB/s",
        ):
            t.add_column(
                col, justify="left" if col in ("name", "arch") else "right", no_wrap=col == "name"
            )
        for g in GPUS.values():
            t.add_row(
                g.name,
                g.arch,
                f"{g.memory_gib:g}",
                f"{g.memory_bandwidth_gbps:g}",
                f"{g.bf16_tflops:g}",
                f"{g.fp8_tflops:g}" if g.fp8_tflops else "-",
                f"{g.int8_tops:g}" if g.int8_tops else "-",
                f"gen{g.pcie_gen} {g.pcie_gbps:g}",
                f"{g.nvlink_gbps:g}" if g.nvlink_gbps else "-",
            )
        console.print(t)

    @sub.command("models")
    def models(json_out: JsonOpt = False) -> None:
        """Model architectures: layers, heads, experts, attention kind, parameters."""
        from rich.table import Table

        from planner.catalog.models import MODELS

        if json_out:
            print_json([m.model_dump() for m in MODELS.values()])
            return
        t = Table(title="Model catalog")
        for col in (
            "name",
            "family",
            "layers",
            "hidden",
            "heads/kv",
            "experts",
            "attention",
            "params B (active)",
        ):
            t.add_column(
                col,
                justify="left" if col in ("name", "family", "attention") else "right",
                no_wrap=col == "name",
            )
        for m in MODELS.values():
            att = (
                "MLA" if m.is_mla else ("GQA" if m.num_kv_heads < m.num_attention_heads else "MHA")
            )
            if m.num_sliding_layers:
                att += f", {m.num_sliding_layers} sliding@{m.sliding_window}"
            exp = f"{m.num_experts_per_tok}/{m.num_experts}" if m.is_moe else "-"
            t.add_row(
                m.name,
                m.family,
                str(m.num_layers),
                str(m.hidden_size),
                f"{m.num_attention_heads}/{m.num_kv_heads}",
                exp,
                att,
                f"{m.total_params_b:.2f} ({m.active_params_b:.2f})",
            )
        console.print(t)

    app.add_typer(sub, name="catalog")
