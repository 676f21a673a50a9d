"""The closed-loop calibration's per-run perf cache keys the architecture by value: equal
architectures held by different objects (each imported run parses its own) share one entry."""

from __future__ import annotations

from planner.catalog.gpus import resolve_gpu
from planner.catalog.models import resolve_arch
from planner.optimizer import perf
from planner.optimizer.perf.calib import default_calib
from planner.optimizer.perf.calib_loop import LoopPoint, loop_predict


def test_equal_archs_held_by_other_objects_share_one_perf(monkeypatch):
    arch = resolve_arch("Qwen3-8B")
    gpu = resolve_gpu("H100-SXM")
    points = [
        LoopPoint(arch.model_copy(), "bf16", 1, 1024, 128, clients, 0.1, 0.01)
        for clients in (1, 4, 16)
    ]
    assert len({id(p.arch) for p in points}) == 3
    built = []
    real = perf.instance_perf

    def counting(*args, **kw):
        built.append(args[:4])
        return real(*args, **kw)

    monkeypatch.setattr(perf, "instance_perf", counting)
    out = loop_predict(points, gpu, default_calib(gpu.arch))
    assert len(built) == 1
    assert out.shape == (3, 2) and (out > 0).all()
