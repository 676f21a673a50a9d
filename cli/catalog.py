"""`planner catalog gpus|models`: the built-in GPU and model catalogs (each row with its source)."""

from __future__ import annotations

import typer

from planner.cli.common import JsonOpt, console, print_json

# Below this console width the source column holds a reference and the sources follow the table.
_WIDE_COLUMNS = 160


def _print(title: str, cols: tuple[str, ...], left: tuple[str, ...], rows: list[tuple]) -> None:
    """A table whose last cell of each row is its source: in the table on a wide console, else
    as a numbered reference listed under the table (readable at 80 columns and in a pipe)."""
    from rich import box
    from rich.table import Table

    wide = console.width >= _WIDE_COLUMNS
    t = Table(title=title, box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
    for col in cols:
        wrap = col.startswith("attention")
        t.add_column(
            col, justify="left" if col in left else "right", no_wrap=not wrap, min_width=wrap * 9
        )
    t.add_column("source" if wide else "src", overflow="fold", min_width=4)
    notes = []
    for *cells, source in rows:
        if wide:
            t.add_row(*cells, source)
        else:
            notes.append(f"[{len(notes) + 1}] {cells[0]}: {source}")
            t.add_row(*cells, f"[{len(notes)}]")
    console.print(t)
    for n in notes:
        console.print(n, soft_wrap=True, highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    """Add `planner catalog gpus` and `planner catalog models`."""
    sub = typer.Typer(help="Built-in GPU and model catalogs.", no_args_is_help=True)

    @sub.command("gpus")
    def gpus(json_out: JsonOpt = False) -> None:
        """GPU types: memory, bandwidth, tensor rates, links, and where each row comes from."""
        from planner.catalog.gpus import GPUS

        if json_out:
            print_json([g.model_dump() for g in GPUS.values()])
            return
        num = lambda x: f"{x:g}" if x else "-"  # noqa: E731
        rows = [
            (
                g.name,
                g.arch,
                f"{g.memory_gib:.0f}",
                f"{g.memory_bandwidth_gbps / 1000:.2g}",
                num(g.bf16_tflops),
                num(g.fp8_tflops),
                num(g.fp4_tflops),
                str(g.pcie_gen),
                num(g.nvlink_gbps),
                g.source,
            )
            for g in GPUS.values()
        ]
        cols = ("name", "arch", "GiB", "TB/s", "bf16", "fp8", "fp4", "PCIe", "NVLink")
        title = "GPU catalog (dense TFLOP/s; PCIe gen; NVLink GB/s per direction)"
        _print(title, cols, ("name", "arch"), rows)

    @sub.command("models")
    def models(json_out: JsonOpt = False) -> None:
        """Model architectures: layers, heads, experts, attention kind, parameters, source."""
        from planner.catalog.models import MODELS

        if json_out:
            print_json([m.model_dump() for m in MODELS.values()])
            return
        rows = []
        for m in MODELS.values():
            kind = (
                "MLA" if m.is_mla else ("GQA" if m.num_kv_heads < m.num_attention_heads else "MHA")
            )
            att = f"{kind} {m.num_attention_heads}/{m.num_kv_heads}"
            if m.num_sliding_layers:
                att += f", {m.num_sliding_layers} sliding {m.sliding_window}"
            exp = f"{m.num_experts_per_tok}/{m.num_experts}" if m.is_moe else "-"
            params = f"{m.total_params_b:.0f}/{m.active_params_b:.1f}"
            rows.append((m.name, str(m.num_layers), att, exp, params, m.source))
        cols = ("name", "layers", "attention q/kv heads", "MoE", "B tot/act")
        _print("Model catalog", cols, ("name", cols[2]), rows)

    app.add_typer(sub, name="catalog")
