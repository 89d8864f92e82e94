"""The real trained policy the rl and replay --weights tests run on (``tito_audit.testing.smollm2``) is what its
package says it is: SmolLM2-135M-Instruct, dequantized from the registry's GGUF into a float32 folder that
transformers and tito-audit load like any checkpoint."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tito_audit import load


def test_the_real_policy_answers_the_capital_of_france(smollm2):
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    model = AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.float32).eval()
    assert model.dtype == torch.float32 and 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    assert getattr(model.config, "quantization_config", None) is None  # a plain checkpoint, not the GGUF object
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=16, do_sample=False)
    answer = tokenizer.decode(out[0][inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    assert answer.strip() == "The capital of France is Paris."
    loaded = load(str(smollm2))  # tito-audit reads its tokenizer and ChatML template from the folder
    assert "<|im_start|>" in loaded.chat_template and len(loaded.tokenizer) == 49152
