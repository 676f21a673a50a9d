"""A start-up the model hub refuses (gated repo, 401) is classified as `hub_auth`, not as a bad
path. The lines are huggingface_hub's and transformers' own messages (their format strings,
as vLLM's log shows them); a real refusal needs the hub, which tests cannot reach."""

from __future__ import annotations

import pytest

from planner.engines.vllm import ENGINE as VLLM

URL = "https://huggingface.co/api/models/meta-llama/Llama-3.1-8B-Instruct/revision/main"
UNAUTHORIZED = (
    "huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. (Request ID: Root=1-x)\n\n"
    f"Repository Not Found for url: {URL}.\nPlease make sure you specified the correct `repo_id` "
    "and `repo_type`.\nIf you are trying to access a private or gated repo, make sure you are "
    "authenticated and your token has the required permissions.\n"
)
GATED = (
    "huggingface_hub.errors.GatedRepoError: 403 Client Error. (Request ID: Root=1-y)\n\n"
    "Cannot access gated repo for url https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/"
    "resolve/main/config.json.\nAccess to model meta-llama/Llama-3.1-8B-Instruct is restricted "
    "and you are not in the authorized list.\n"
)
GATED_TRANSFORMERS = (
    "OSError: You are trying to access a gated repo.\nMake sure to have access to it at "
    "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct.\n"
)
NOT_FOUND = (  # a wrong repo id: still a bad path
    "huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error.\n\n"
    "Repository Not Found for url: https://huggingface.co/api/models/no/such-model.\n"
)


@pytest.mark.parametrize("log", [UNAUTHORIZED, GATED, GATED_TRANSFORMERS])
def test_gated_or_unauthorized_is_hub_auth_with_its_fix(log):
    assert VLLM.classify_failure(log) == "hub_auth"
    fix = VLLM.failure_fix("hub_auth")
    assert "HF_TOKEN" in fix and "licence" in fix


def test_a_missing_repo_is_still_a_bad_path():
    assert VLLM.classify_failure(NOT_FOUND) == "bad_model_path"
