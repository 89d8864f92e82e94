"""``mistral-common`` (how vLLM renders Mistral models with ``--tokenizer-mode mistral``): chat requests encoded to
token ids by the library's own tokenizer file.

``mistral-common@FILE`` names the tokenizer file: a path, or the name of one the library ships (its ``data``
folder). Plain ``mistral-common`` takes the shipped file whose vocabulary is the model's (same size, and the
same pieces for the control tokens and a sample of the rest); none matching is an error, never a guess. The
library's ids must decode to the same text with the model's tokenizer, or the model is not audited.

A conversation that ends with the assistant is validated as fine-tuning data (mistral-common's serving mode
refuses it), every other one as a serving request; there is no separate generation prompt (``[/INST]`` and
``[/TOOL_RESULTS]`` end every prompt), so ``add_generation_prompt`` changes nothing, as in the HF template.
"""

from __future__ import annotations

import datetime as dt
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tito_audit.engines.base import (
    Engine,
    EngineInfo,
    Message,
    Rendered,
    RendererRefused,
    RendererUnavailable,
    refused,
)
from tito_audit.registry import RENDERERS

if TYPE_CHECKING:
    from tito_audit.rendering.guard import RenderLimits
    from tito_audit.sources.load import LoadedModel

NAME = "mistral-common"
_SAMPLE = 512  # ordinary ids compared, spread over the vocabulary, when picking a shipped file


def shipped_files() -> list[Path]:
    """Tokenizer files that mistral-common ships (tekken JSON first: they load without sentencepiece)."""
    from importlib.resources import files

    folder = Path(str(files("mistral_common") / "data"))
    files_ = [p for p in folder.iterdir() if p.is_file()] if folder.is_dir() else []
    return sorted(files_, key=lambda p: (not p.name.startswith("tekken"), p.name))


def _load(path: Path, finetuning: bool) -> Any:
    from mistral_common.protocol.instruct.validator import ValidationMode
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    return MistralTokenizer.from_file(path, mode=ValidationMode.finetuning if finetuning else ValidationMode.test)


def _decode_keep(library: Any, ids: list[int]) -> str:
    from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy

    return str(library.decode(ids, special_token_policy=SpecialTokenPolicy.KEEP))


def _same_vocabulary(library: Any, tokenizer: Any) -> str | None:
    """None when the library's tokenizer and the model's agree on the size, bos/eos and a spread sample of the
    ordinary ids; else what differs. Control tokens the library never writes may be named differently (Nemo's
    tokenizer.json names unused ones ``<pad>`` where tekken says ``[IMG]``): every render's ids are checked to
    decode alike instead."""
    inner = library.instruct_tokenizer.tokenizer
    size = int(inner.n_words)
    if size != len(tokenizer):
        return f"{size:,} ids against the model's {len(tokenizer):,}"
    specials = int(inner.num_special_tokens)
    step = max(1, (size - specials) // _SAMPLE)
    for i in [int(inner.bos_id), int(inner.eos_id), *range(specials, size, step)]:
        mine = _decode_keep(library, [i])
        theirs = tokenizer.decode([i], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if mine != theirs and "\ufffd" not in mine + theirs:
            return f"id {i} is {mine!r} there and {theirs!r} in the model's tokenizer"
    return None


class MistralCommon(Engine):
    def __init__(self, model_name: str, tokenizer: Any, file: str | None) -> None:
        try:
            import mistral_common  # noqa: F401
        except ImportError:
            raise RendererUnavailable(
                model_name, f"renderer {NAME}: the package is not installed ({ENTRY.install_hint()})"
            ) from None
        self._tokenizer = tokenizer
        skipped: list[str] = []
        also: list[str] = []
        if file is not None:
            path = Path(file)
            if not path.exists():
                path = next((p for p in shipped_files() if p.name == file), path)
            if not path.exists():
                names = ", ".join(p.name for p in shipped_files())
                raise RendererUnavailable(model_name, f"renderer {NAME}@{file}: no such file (it ships {names})")
            self._serving = self._loaded(model_name, path)
            why = _same_vocabulary(self._serving, tokenizer)
            if why is not None:
                raise RendererUnavailable(model_name, f"renderer {NAME}@{path.name} is not this model's: {why}")
        else:
            path, self._serving = self._matching(model_name, tokenizer, skipped, also)
        self._path = path
        self._finetuning: Any = None
        detail: dict[str, Any] = {"tokenizer_file": path.name}
        if also:
            detail["also_matching"] = also  # shipped files with the same vocabulary: name one with @FILE
        if skipped:
            detail["not_tried"] = skipped
        self.info = EngineInfo(
            f"{NAME}@{path.name}", f"mistral-common {metadata.version('mistral_common')}", "ids", detail=detail
        )

    def _loaded(self, model_name: str, path: Path) -> Any:
        try:
            return _load(path, finetuning=False)
        except Exception as exc:
            raise RendererUnavailable(
                model_name, f"renderer {NAME}@{path.name}: {refused(NAME, exc).message}"
            ) from None

    def _matching(self, model_name: str, tokenizer: Any, skipped: list[str], also: list[str]) -> tuple[Path, Any]:
        """The first shipped file whose vocabulary is the model's; ``also`` receives the other matching ones,
        ``skipped`` those that could not be loaded (a sentencepiece file without sentencepiece installed)."""
        differs = []
        chosen: tuple[Path, Any] | None = None
        for path in shipped_files():
            try:
                library = _load(path, finetuning=False)
            except Exception as exc:
                skipped.append(f"{path.name} ({refused(NAME, exc).message})")
                continue
            why = _same_vocabulary(library, tokenizer)
            if why is not None:
                differs.append(f"{path.name}: {why}")
            elif chosen is None:
                chosen = path, library
            else:
                also.append(path.name)
        if chosen is None:
            raise RendererUnavailable(
                model_name,
                f"renderer {NAME}: no tokenizer file it ships is this model's ({'; '.join(differs + skipped)}); "
                f"name one with --renderer {NAME}@FILE",
            )
        return chosen

    def stop_ids(self) -> tuple[int, ...]:
        return (int(self._serving.instruct_tokenizer.tokenizer.eos_id),)

    def render(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        add_generation_prompt: bool,
        options: dict[str, Any],
        date: dt.datetime,
    ) -> Rendered:
        from mistral_common.protocol.instruct.request import ChatCompletionRequest

        self.refuse_unknown(options)
        final = bool(messages) and messages[-1].get("role") == "assistant"
        try:
            library = self._serving
            if final:
                if self._finetuning is None:
                    self._finetuning = _load(self._path, finetuning=True)
                library = self._finetuning
            request = ChatCompletionRequest.from_openai(messages, tools=tools)
            ids = list(library.encode_chat_completion(request).tokens)
        except Exception as exc:
            raise refused(NAME, exc) from exc
        mine = _decode_keep(library, ids)
        theirs = self._tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if mine != theirs:
            raise RendererRefused(f"{NAME}: its ids decode differently with the model's tokenizer")
        return Rendered(ids=ids)


def for_model(model: LoadedModel, file: str | None, limits: RenderLimits | None) -> Engine:
    return MistralCommon(model.name, model.tokenizer, file)


ENTRY = RENDERERS.register(
    NAME,
    "mistral-common, how vLLM renders Mistral models (--tokenizer-mode mistral)",
    for_model,
    extra="mistral",
    order=20,
    meta={
        "choice": "FILE",
        "library": "`mistral-common`",
        "renders": "ids",
        "notes": "the tokenizer file: a path, or one the library ships; plain `mistral-common` takes the first "
        "shipped file whose vocabulary is the model's (the report lists other matching files in `also_matching`, "
        "files it could not load in `not_tried`)",
    },
)
