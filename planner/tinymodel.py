"""A tiny random-weight Llama that vLLM (CPU build included) can serve, built offline.

`embedding=True` saves the same network without its LM head as a `LlamaModel`: vLLM serves a
`*Model` architecture as an embedding model (`/v1/embeddings`), as it does e5-mistral's.

No model can be downloaded on the development machines, so tests, examples and the profiler
build this one: a `tokenizers` BPE trained on a few bundled lines, wrapped as a
`PreTrainedTokenizerFast` with a chat template, and a `LlamaForCausalLM` with seeded random
weights saved in bf16. Same parameters, same files (seeded); a finished build is recognised
by its marker file and reused; a build is written in a temporary sibling directory and
renamed into place, so readers never see half a model.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MARKER = "planner-tiny.json"

# Training text for the BPE: a few lines covering letters, digits and punctuation.
_TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "A small team runs a few models on a small cluster of mixed GPUs.",
    "Agents hand off work: the planner asks the coder, the coder asks the summarizer.",
    "Switch latency is the time to the first token after a hand-off to a sleeping model.",
    "def add(a, b):\n    return a + b\n",
    "for i in range(10): print(i * 2, i ** 2)",
    "Hello! How are you today? I am fine, thank you.",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000 3.14 2.71",
    "user: write a haiku about memory.\nassistant: weights sleep in host RAM, wake in a blink.",
    '{ "model": "tiny", "prompt": "hi", "max_tokens": 16 }',
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz",
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
]

_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def _params(**kw: int) -> dict[str, int]:
    return {"format": 1, **kw}


def is_built(out_dir: str | Path, params: dict[str, int] | None = None) -> bool:
    """Whether `out_dir` holds a finished tiny model (with exactly `params`, when given)."""
    marker = Path(out_dir) / MARKER
    try:
        found = json.loads(marker.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return params is None or found == params


@dataclass(frozen=True)
class TinySizes:
    """Shape of the tiny model, for its builder and for its models.yaml numbers alike."""

    hidden_size: int = 128
    intermediate_size: int = 256
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    vocab_size: int = 512  # BPE target; the model's vocabulary is the tokenizer's real size
    max_position_embeddings: int = 2048  # bounds `--max-model-len` (vLLM refuses more)


def tiny_arch(sizes: TinySizes = TinySizes()) -> dict[str, Any]:
    """The architecture numbers of a tiny model, as models.yaml inline numbers: what the CPU
    example, `planner init` and the tests declare."""
    z = sizes
    head_dim = z.hidden_size // z.heads
    attn = z.hidden_size * head_dim * (2 * z.heads + 2 * z.kv_heads)  # q, o + k, v projections
    mlp = 3 * z.hidden_size * z.intermediate_size  # gate, up, down
    # untied embedding + lm_head
    params = z.layers * (attn + mlp) + 2 * z.vocab_size * z.hidden_size
    return {
        "name": "tiny-llama",
        "family": "llama",
        "num_layers": z.layers,
        "hidden_size": z.hidden_size,
        "num_attention_heads": z.heads,
        "num_kv_heads": z.kv_heads,
        "head_dim": head_dim,
        "intermediate_size": z.intermediate_size,
        "vocab_size": z.vocab_size,
        "total_params_b": round(params / 1e9, 6),
        "active_params_b": round(params / 1e9, 6),
        "max_position_embeddings": z.max_position_embeddings,
    }


def build_tiny_model(
    out_dir: str | Path, *, seed: int = 0, sizes: TinySizes = TinySizes(), embedding: bool = False
) -> Path:
    """Build (or reuse) a tiny Llama checkpoint with tokenizer in `out_dir`; returns its path
    (`embedding`: an embedding model, served on `/v1/embeddings`)."""
    out = Path(out_dir).resolve()
    params = _params(seed=seed, **asdict(sizes))
    if embedding:  # only then: the chat model's marker (and so its reuse) stays as it was
        params["embedding"] = 1
    if is_built(out, params):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        _write_model(tmp, params)
        (tmp / MARKER).write_text(json.dumps(params, indent=1, sort_keys=True))
        if out.exists():
            if is_built(out, params):  # another process finished the same build meanwhile
                shutil.rmtree(tmp, ignore_errors=True)
                return out
            shutil.rmtree(out)  # stale build with other parameters
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _write_model(dest: Path, p: dict[str, int]) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from planner.torch_addons import hide_unloadable

    hide_unloadable()  # before transformers: it imports torchvision whenever it is installed
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaModel, PreTrainedTokenizerFast
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no "Writing model shards" bars on stderr

    specials = ["<unk>", "<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>"]
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=p["vocab_size"],
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte encodable
        show_progress=False,
    )
    bpe.train_from_iterator(_TEXT, trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=p["max_position_embeddings"],
    )
    tok.chat_template = _CHAT_TEMPLATE
    tok.save_pretrained(dest)

    torch.manual_seed(p["seed"])
    cfg = LlamaConfig(
        hidden_size=p["hidden_size"],
        intermediate_size=p["intermediate_size"],
        num_hidden_layers=p["layers"],
        num_attention_heads=p["heads"],
        num_key_value_heads=p["kv_heads"],
        vocab_size=len(tok),
        max_position_embeddings=p["max_position_embeddings"],
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    if not p.get("embedding"):
        LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(dest, safe_serialization=True)
        return
    # vLLM loads a `LlamaModel` into its Llama with the causal LM's names (`model.` first)
    from safetensors.torch import save_file

    model = LlamaModel(cfg).to(torch.bfloat16)
    model.config.save_pretrained(dest)
    weights = {f"model.{k}": v.contiguous() for k, v in model.state_dict().items()}
    save_file(weights, str(dest / "model.safetensors"), metadata={"format": "pt"})
