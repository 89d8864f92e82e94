"""What a caller of the public API hands over, read as what the code below it needs, or refused in one line.

The library's entry points take a model (``audit_model``, ``Trajectory.from_model``), a list of model specs
(``audit_models``) or a tokenizer (``check_batch``, ``Trajectory.from_tokenizer``). Handed something else, the
code below fails far from the call, with a message about an attribute the caller never named (``'str' object has
no attribute 'tokenizer'``), or worse, goes on: ``audit_models("qwen3-0.6b")`` audited each of its ten letters as
a model. Here each is read once, where it enters:

- a model: a ``LoadedModel``, or a spec ``load`` takes (a Hub id, a local folder, a bundled name), loaded;
- model specs: one spec (a str or a path) is a list of one, not of its characters;
- a tokenizer: anything with ``decode`` and ``convert_ids_to_tokens``, or a ``LoadedModel`` (its tokenizer, with
  its template and generation eos ids).

Anything else is a ``TypeError`` that names the entry point, what it takes and what it got. ``load`` reads its
own spec (``load.model_spec``); ``rollout`` stands below this package and checks its two constructors itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from os import PathLike
from typing import Any

from tito_audit.errors import kind_of
from tito_audit.sources.load import LoadedModel, load, model_spec


def loaded_model(model: Any, where: str) -> Any:
    """``model`` as a ``LoadedModel``: itself, or the spec loaded (``tito_audit.load``)."""
    if isinstance(model, LoadedModel):
        return model
    if isinstance(model, str | PathLike):
        return load(os.fspath(model))
    raise TypeError(
        f"{where}: expected a LoadedModel (tito_audit.load) or a model spec (Hub id, local folder, bundled name), "
        f"not {kind_of(model)}"
    )


def model_specs(specs: Any, where: str) -> list[str]:
    """``specs`` as a list: one spec (a str or a path) is one model, never the characters of its name."""
    if isinstance(specs, str | PathLike):
        return [os.fspath(specs)]
    if isinstance(specs, bytes) or not isinstance(specs, Iterable):
        raise TypeError(
            f"{where}: expected model specs (a list of Hub ids, folders or bundled names), not {kind_of(specs)}"
        )
    return [os.fspath(model_spec(s, where)) for s in specs]


@dataclass(frozen=True)
class TokenizerParts:
    """What a ``tokenizer=`` argument gives: the tokenizer, and for a ``LoadedModel`` the template under audit and
    the generation eos ids (None: the tokenizer's own template, the generation config beside it)."""

    tokenizer: Any = None
    chat_template: str | None = None
    generation_eos_ids: tuple[int, ...] | None = None


def tokenizer_parts(tokenizer: Any, where: str) -> TokenizerParts:
    """``tokenizer`` (with ``decode`` and ``convert_ids_to_tokens``), a ``LoadedModel`` (its tokenizer, template and
    generation eos ids: what ``Trajectory.from_model`` stops on), or None."""
    if tokenizer is None:
        return TokenizerParts()
    if isinstance(tokenizer, LoadedModel):
        return TokenizerParts(tokenizer.tokenizer, tokenizer.chat_template, tuple(tokenizer.generation_eos_ids))
    if callable(getattr(tokenizer, "decode", None)) and callable(getattr(tokenizer, "convert_ids_to_tokens", None)):
        return TokenizerParts(tokenizer)
    raise TypeError(f"{where}: tokenizer= takes a Hugging Face tokenizer or a LoadedModel, not {kind_of(tokenizer)}")
