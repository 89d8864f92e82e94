"""The policy: a small randomly initialised causal LM on the model's real tokenizer, or real weights.

The small model may use a compacted vocabulary (only the ids that occur in the episodes, plus one shared row for
any other id): a step costs far less. It is a different stand-in model from the full-vocabulary one (another
softmax, other random rows), so its gradient figures differ too; only the token facts (which tokens differ,
mask flips) are the same under both. ``VocabMap`` translates between tokenizer ids and model ids.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tito_audit.errors import ModelNotFound, UsageError

VOCAB_MAP_FILE = "tito_vocab_map.json"


@dataclass
class VocabMap:
    """Tokenizer id <-> model id. ``full`` when the model uses the tokenizer's ids directly."""

    model_to_tok: list[int] | None  # None = identity
    size: int
    valid: int | None = None  # model ids >= valid are padding rows (never sampled)

    @classmethod
    def full(cls, size: int, valid: int | None = None) -> VocabMap:
        return cls(None, size, valid if valid is not None and valid < size else None)

    @classmethod
    def compact(cls, used: Iterable[int]) -> VocabMap:
        """Model ids for the used tokenizer ids, plus one last slot (tokenizer id -1) for any other id:
        re-encoding a sampled text can produce ids that never occurred; they share that row, and the
        sampler never emits it."""
        ids = [*sorted(set(int(i) for i in used) - {-1}), -1]
        return cls(ids, len(ids))

    @property
    def unk(self) -> int | None:
        return None if self.model_to_tok is None or self.model_to_tok[-1] != -1 else len(self.model_to_tok) - 1

    @property
    def is_full(self) -> bool:
        return self.model_to_tok is None

    def _tok_to_model(self) -> dict[int, int]:
        cached: dict[int, int] | None = getattr(self, "_cache", None)
        if cached is None:
            cached = {t: i for i, t in enumerate(self.model_to_tok or [])}
            self._cache = cached
        return cached

    def to_model(self, ids: Sequence[int]) -> list[int]:
        if self.model_to_tok is None:
            return list(ids)
        table = self._tok_to_model()
        unk = self.unk
        try:
            return [table[int(i)] if unk is None else table.get(int(i), unk) for i in ids]
        except KeyError as exc:
            raise UsageError("rl", f"token id {exc.args[0]} is outside the compacted vocabulary") from exc

    def to_tok(self, ids: Sequence[int]) -> list[int]:
        if self.model_to_tok is None:
            return [int(i) for i in ids]
        return [self.model_to_tok[int(i)] for i in ids]

    def contains(self, tok_id: int) -> bool:
        return self.model_to_tok is None or int(tok_id) in self._tok_to_model()


def stop_model_ids(vmap: VocabMap, stop_ids: Sequence[int]) -> list[int]:
    """The model ids of the tokenizer's stop ids (a compacted vocabulary keeps only those it has rows for)."""
    stops = set(stop_ids)
    if vmap.is_full:
        return [int(t) for t in stops if int(t) < vmap.size]
    return [i for i, t in enumerate(vmap.model_to_tok or []) if t in stops]


ARCHS = ("qwen2", "llama")


def build_small_model(
    vocab_size: int,
    arch: str = "qwen2",
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    seed: int = 0,
    max_positions: int = 4096,
) -> Any:
    """A randomly initialised 2-layer causal LM (tied embeddings), fp32."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    if arch not in ARCHS:
        raise UsageError("rl", f"--arch must be one of {', '.join(ARCHS)} (got {arch!r})")
    common: dict[str, Any] = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    config = Qwen2Config(**common) if arch == "qwen2" else LlamaConfig(**common)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.config.use_cache = True
    return model


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise UsageError("rl", f"--device must be auto, cpu, cuda or cuda:N (got {device!r})")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError("rl", f"--device {device} requested but torch sees no CUDA device")
    if device.startswith("cuda:") and int(device.split(":")[1]) >= torch.cuda.device_count():
        raise UsageError("rl", f"--device {device}: torch sees {torch.cuda.device_count()} CUDA device(s)")
    return torch.device(device)


def torch_dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]


def load_weights(
    path_or_repo: str, device: torch.device, tokenizer_size: int, dtype: torch.dtype = torch.float32
) -> tuple[Any, VocabMap]:
    """A real causal LM (local folder or Hub id) in ``dtype`` (float32 by default: master weights for the
    gradient; bfloat16 halves the weights and every gradient held).

    On CUDA, an fp32 policy samples under bf16 autocast as an inference engine would (see ``sampling``).
    A folder written by ``--save-policy`` carries its vocabulary map. The weights must cover every id of the
    tokenizer; rows past ``len(tokenizer)`` (padding to a multiple of 64 or 128) are never sampled.
    """
    from transformers import AutoModelForCausalLM

    folder = Path(path_or_repo).expanduser()
    model: Any
    try:
        model = AutoModelForCausalLM.from_pretrained(str(folder) if folder.is_dir() else path_or_repo, dtype=dtype)
    except (OSError, ValueError) as exc:
        raise ModelNotFound(path_or_repo, f"cannot load weights: {str(exc).splitlines()[0][:200]}") from exc
    vmap_file = folder / VOCAB_MAP_FILE
    if folder.is_dir() and vmap_file.is_file():
        ids = json.loads(vmap_file.read_text())["model_to_tok"]
        vmap = (
            VocabMap(ids, len(ids)) if ids is not None else VocabMap.full(model.config.vocab_size, valid=tokenizer_size)
        )
    else:
        rows = model.get_input_embeddings().weight.shape[0]
        out_rows = model.get_output_embeddings().weight.shape[0] if model.get_output_embeddings() is not None else rows
        if min(rows, out_rows) < tokenizer_size:
            raise UsageError(
                path_or_repo,
                f"the weights have {min(rows, out_rows):,} vocabulary rows but the tokenizer has {tokenizer_size:,} "
                "ids: these weights do not belong to this tokenizer",
            )
        vmap = VocabMap.full(rows, valid=tokenizer_size)
    return model.to(device), vmap


def save_policy(model: Any, vmap: VocabMap, tokenizer: Any, chat_template: str, folder: str | Path) -> Path:
    """A normal transformers folder (config, safetensors, tokenizer, chat template) + the vocabulary map."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "chat_template.jinja").write_text(chat_template, encoding="utf-8")
    (out / VOCAB_MAP_FILE).write_text(json.dumps({"model_to_tok": vmap.model_to_tok}))
    return out


def clone_frozen(model: Any) -> Any:
    """A frozen copy at the policy's own precision (a bf16 reference against an fp32 policy makes the step-0
    KL rounding noise)."""
    import copy

    ref = copy.deepcopy(model)
    ref.eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def cap_threads(device: torch.device, parameters: int) -> int:
    """Torch CPU threads for this run: one for the small stand-in (its matrices are too small to split, and on
    a busy 2-core machine a step took 1.9-5.2 s with the default threads against 0.17 s with one), otherwise
    the cores this process may use. ``OMP_NUM_THREADS`` wins when set."""
    import os

    if os.environ.get("OMP_NUM_THREADS"):
        n = max(1, int(os.environ["OMP_NUM_THREADS"]))
    elif device.type == "cpu" and parameters < 50_000_000:
        n = 1
    else:
        n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    torch.set_num_threads(n)
    return n
