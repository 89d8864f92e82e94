"""A model folder for ``rl`` tests: Qwen2.5's tokenizer with another chat template (``rl`` loads a model by name or
folder, not a template file)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import snapshot


def qwen_with_template(folder: Path, template: Path) -> str:
    """``folder`` holding Qwen2.5-7B-Instruct's tokenizer files with ``template`` as its chat template."""
    source = snapshot("Qwen/Qwen2.5-7B-Instruct")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(source / name, folder / name)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "chat_template.jinja").write_text(template.read_text())
    return str(folder)
