"""Each instance's secret: in the environment (VLLM_API_KEY), never on argv, never printed."""

from __future__ import annotations

import pytest

from planner.cli.main import main
from planner.engines.vllm import ENGINE
from planner.schemas.plan import Instance


def _run(argv, capsys) -> tuple[int, str]:
    """Exit code, and stderr + stdout on one line."""
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv])
    out = capsys.readouterr()
    return int(e.value.code or 0), " ".join((out.err + out.out).split())


def test_the_secret_goes_through_the_environment_never_argv():
    inst = Instance.model_validate(
        {
            "id": "a",
            "model": "m",
            "variant": "v",
            "node": "n",
            "gpus": [0],
            "port": 8000,
            "memory_gib": {"weights": 1, "kv": 1, "overhead": 1},
        }
    )
    for device in ("cuda", "cpu"):
        argv, env = ENGINE.build_argv(
            inst, model_path="/m", served_name="m", device=device, secret="s3"
        )
        assert env["VLLM_API_KEY"] == "s3" and "s3" not in argv
        assert argv[argv.index("--host") + 1] == "127.0.0.1"
        assert ("VLLM_SERVER_DEV_MODE" in env) == (device == "cuda")  # only where sleep is used


def test_state_export_does_not_print_the_secrets(tmp_path, capsys):
    from planner.adjuster.state import InstanceRow, StateStore

    with StateStore(tmp_path / "s") as st:
        st.upsert(
            InstanceRow(
                id="a",
                model="m",
                variant="v",
                node="n",
                port=8000,
                status="awake",
                secret="very-secret-key",
            )
        )
        assert "very-secret-key" not in repr(st.get("a"))
    code, out = _run(["state", "export", "--state-dir", tmp_path / "s"], capsys)
    assert code == 0 and '"id": "a"' in out and "very-secret-key" not in out, out
