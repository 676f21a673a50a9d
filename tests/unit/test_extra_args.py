"""`extra_args` may not set what the planner sets itself (issue 28 item 4).

The golden small plan, edited as a person would: `validate` and `apply` exit 2 naming the
flag and the plan field (or the planner) that owns it, before any side effect.
`--trust-remote-code` passes only where models.yaml marks that variant `trust_remote_code`.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from planner.cli.main import main
from planner.engines.vllm import ENGINE, MANAGED_FLAGS, managed_flag
from planner.schemas.plan import Instance

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "tests" / "data" / "small"
GOLDEN = yaml.safe_load((ROOT / "tests" / "golden" / "plan_small.yaml").read_text())


def _run(argv, capsys) -> tuple[int, str]:
    """Exit code, and stderr + stdout on one line."""
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv])
    out = capsys.readouterr()
    return int(e.value.code or 0), " ".join((out.err + out.out).split())


def _plan(tmp_path: Path, extra_args: list[str], models: Path = SMALL / "models.yaml") -> Path:
    doc = copy.deepcopy(GOLDEN)
    for k in ("cluster", "models", "slo", "workload"):
        doc["inputs"][k]["path"] = str(SMALL / f"{k}.yaml")
    doc["inputs"]["models"]["path"] = str(models)
    doc["points"][0]["instances"][0]["engine"]["extra_args"] = extra_args
    p = tmp_path / "plan.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


REFUSED = [
    (["--host", "0.0.0.0"], "'--host'", "loopback only"),
    (["--port=9000"], "'--port=9000'", "`port`"),
    (["--api_key", "x"], "'--api_key'", "a secret per instance"),
    (["--hos", "0.0.0.0"], "'--hos'", "loopback only"),  # vLLM's parser takes prefixes
    (["--seed", "0", "--enable-sleep-mode"], "'--enable-sleep-mode'", "`tier`"),
    (["-tp", "2"], "'-tp'", "`tp`"),
    (["--gpu-memory-utilization", "0.99"], "--gpu-memory-utilization", "engine.gpu_memory_util"),
    (["--served-model-name", "x"], "--served-model-name", "`model`"),
    (["--config", "c.yaml"], "'--config'", "could set any managed flag"),
    (["--middleware", "m.M"], "'--middleware'", "imports no code"),  # issue 43's three
    (["--allowed-origins", '["*"]'], "'--allowed-origins'", "only the gateway"),
    (["--ssl-keyfile", "k.pem"], "'--ssl-keyfile'", "engines serve loopback"),
]


@pytest.mark.parametrize("args,flag,owner", REFUSED, ids=[" ".join(c[0]) for c in REFUSED])
def test_validate_and_apply_refuse_a_managed_flag(tmp_path, capsys, args, flag, owner):
    plan, state = _plan(tmp_path, args), tmp_path / "state"
    for argv in (
        ["validate", plan],
        ["apply", plan, "--state-dir", state, "--dry-run", "--node", "n0"],
        ["apply", plan, "--state-dir", state, "--node", "n0"],
    ):
        code, err = _run(argv, capsys)
        assert code == 2, (argv, err)
        assert "points[0].instances[0].engine.extra_args" in err, err
        assert flag in err and owner in err and "which the planner manages" in err, err
        assert "Traceback" not in err
    assert not state.exists()


def test_other_flags_pass(tmp_path, capsys):
    code, err = _run(["validate", _plan(tmp_path, ["--seed", "0", "--dtype", "bfloat16"])], capsys)
    assert code == 0, err


def test_every_flag_the_argv_builder_sets_is_managed():
    """The one list covers what build_argv writes itself (a new flag there must join it)."""
    inst = Instance.model_validate(
        {
            "id": "a",
            "model": "m",
            "variant": "v",
            "node": "n",
            "gpus": [0],
            "port": 8000,
            "memory_gib": {"weights": 1, "kv": 1, "overhead": 1},
            "expert_cpu_offload_gib": 1,
            "kv_cpu_offload_gib": 1,
            "engine": {"max_num_batched_tokens": 64, "enforce_eager": True, "quantization": "awq"},
        }
    )
    for device in ("cuda", "cpu"):
        argv, _ = ENGINE.build_argv(inst, model_path="/m", served_name="m", device=device)
        set_flags = {a for a in argv[3:] if a.startswith("--")} - {"--dtype"}
        assert set_flags <= set(MANAGED_FLAGS), set_flags - set(MANAGED_FLAGS)
    assert managed_flag(["--seed", "0", "--max-model-len=8"]) is not None
    assert managed_flag(["--seed", "-1", "--dtype", "half"]) is None


def _models_with_remote_code(tmp_path: Path) -> Path:
    doc = yaml.safe_load((SMALL / "models.yaml").read_text())
    for v in doc["models"][0]["variants"]:
        v["trust_remote_code"] = True
    p = tmp_path / "models.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def test_trust_remote_code_only_where_the_models_file_says_so(tmp_path, capsys):
    plan, state = _plan(tmp_path, ["--trust-remote-code"]), tmp_path / "state"
    for argv in (
        ["validate", plan],
        ["apply", plan, "--state-dir", state, "--dry-run", "--node", "n0"],
    ):
        code, err = _run(argv, capsys)
        assert code == 2, (argv, err)
        assert "points[0].instances[0].engine.extra_args" in err
        assert "'--trust-remote-code'" in err and "trust_remote_code: true" in err, err
    assert not state.exists()
    trusted = _models_with_remote_code(tmp_path)
    plan = _plan(tmp_path, ["--trust-remote-code"], models=trusted)
    code, err = _run(["validate", plan], capsys)
    assert code == 0, err
