"""Turn a folder of tokenizer files into a tokenizer and the chat template transformers would use.

The tokenizer is the one ``AutoTokenizer.from_pretrained`` gives (never ``trust_remote_code``; ``tokenizer``
spares AutoTokenizer's import cost where the tokenizer files alone decide its class) so that the audit sees
exactly what an RL practitioner's stack sees, quirks included. Template resolution is transformers' own:
``chat_template.jinja`` over ``chat_template.json`` over ``tokenizer_config.json``, named templates through
``get_chat_template`` (``tool_use`` when tools are given, else ``default``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from dataclasses import asdict, dataclass, field
from functools import cache
from os import PathLike
from pathlib import Path
from typing import Any

from tito_audit.errors import (
    CorruptConfig,
    CorruptTokenizer,
    NoChatTemplate,
    TemplateCompileError,
    UnsupportedLibrary,
    UsageError,
    kind_of,
)
from tito_audit.sources.base import ModelFiles

_JSON_FILES = (
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.json",
    "generation_config.json",
    "added_tokens.json",
    "config.json",
)
# Any tools list selects the ``tool_use`` named template, as transformers does for tool conversations.
_TOOLS_PROBE = [{"type": "function", "function": {"name": "probe", "parameters": {}}}]


SYNTHESIZED = "synthesized"  # ``Provenance.tokenizer`` of a tokenizer built by ``sources.synthesized``


def _library_versions() -> dict[str, Any]:
    from tito_audit.compat import library_versions

    return dict(library_versions())


@dataclass(frozen=True)
class Provenance:
    """Where every byte the audit looked at came from; copied into every report."""

    model: str
    source: str
    repo_id: str | None
    revision: str | None
    template_file: str
    template_name: str | None
    template_sha256: str | None  # None where no template renders (``--renderer``: ``template_file`` names what does)
    tokenizer_class: str
    bos_token: str | None
    eos_token: str | None
    vocab_size: int
    license: str | None = None
    files: dict[str, str] = field(default_factory=dict)
    # "real", or "synthesized" (``sources.synthesized``): the base named, the control tokens added to it
    tokenizer: str = "real"
    tokenizer_base: str | None = None
    synthesized_tokens: tuple[str, ...] = ()
    # tito-audit, transformers, tokenizers and jinja2 versions, and the compat fallbacks, of the process that
    # loaded it (``compat.library_versions``): a verdict can change with a transformers release
    libraries: dict[str, Any] = field(default_factory=_library_versions)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LoadedModel:
    """A tokenizer plus the exact chat template under audit."""

    name: str
    tokenizer: Any  # transformers.PreTrainedTokenizerBase
    chat_template: str
    provenance: Provenance
    generation_eos_ids: tuple[int, ...] = ()
    hidden_specials: frozenset[str] = frozenset()  # special tokens of the tokenizer that the audit must not use

    def with_template(self, template: str, origin: str) -> LoadedModel:
        """The same tokenizer with another template (a patched one, a scanned one)."""
        prov = Provenance(
            **{
                **self.provenance.to_dict(),
                "template_file": origin,
                "template_name": None,
                "template_sha256": sha256_text(template),
            }
        )
        return LoadedModel(self.name, self.tokenizer, template, prov, self.generation_eos_ids, self.hidden_specials)

    def with_renderer(self, identity: str) -> LoadedModel:
        """The same tokenizer rendered by another renderer than a template (``--renderer``): no template source to
        read or hash; the provenance names the renderer (``EngineInfo.identity``: library, version, family...)."""
        model = self.with_template("", f"(none: renderer {identity})")
        model.provenance = Provenance(**{**model.provenance.to_dict(), "template_sha256": None})
        return model


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _validate_json_files(spec: str, folder: Path) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for name in _JSON_FILES:
        path = folder / name
        if not path.is_file():
            continue
        try:
            parsed[name] = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptConfig(spec, f"{name} is not valid JSON ({exc})") from exc
        if not isinstance(parsed[name], dict):
            raise CorruptConfig(spec, f"{name} is not a JSON object")
    templates = parsed.get("tokenizer_config.json", {}).get("chat_template")
    if isinstance(templates, list):  # named templates: transformers reads each entry's "name" and "template"
        for k, entry in enumerate(templates):
            if not (isinstance(entry, dict) and isinstance(entry.get("name"), str)) or "template" not in entry:
                raise CorruptConfig(
                    spec,
                    f"tokenizer_config.json's chat_template[{k}] is not a named template "
                    '({"name": ..., "template": ...})',
                )
    return parsed


@cache
def _quiet_transformers() -> None:
    """transformers' warnings off (errors stay), once, after transformers has set up its logging: setting the level
    before that is undone when transformers configures its logger on import."""
    logging.getLogger("transformers").setLevel(logging.ERROR)


def _load_tokenizer(spec: str, folder: Path, tokenizer_config: dict[str, Any]) -> Any:
    from tito_audit.sources.tokenizer import collector_paused

    with collector_paused():  # importing transformers and parsing tokenizer.json: allocations, no cycles
        return _load_tokenizer_now(spec, folder, tokenizer_config)


def _load_tokenizer_now(spec: str, folder: Path, tokenizer_config: dict[str, Any]) -> Any:
    from transformers.utils import logging as hf_logging

    from tito_audit.sources.tokenizer import load_tokenizer

    if not any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt")):
        raise CorruptTokenizer(spec, f"no tokenizer file (tokenizer.json, tokenizer.model, vocab.*) in {folder}")
    _quiet_transformers()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return load_tokenizer(folder, tokenizer_config)
    except Exception as exc:
        tokenizer_json = folder / "tokenizer.json"
        if tokenizer_json.is_file():
            try:
                json.loads(tokenizer_json.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as json_exc:
                raise CorruptTokenizer(spec, f"tokenizer.json is corrupt or truncated ({json_exc})") from exc
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise CorruptTokenizer(spec, f"tokenizer failed to load: {type(exc).__name__}: {first[:200]}") from exc
    finally:
        hf_logging.set_verbosity(verbosity)


def _template_origin(folder: Path, template: str, name: str | None, config: dict[str, Any]) -> str:
    """Which file the resolved template text came from (first match in transformers' precedence)."""
    candidates: list[tuple[str, str | None]] = []
    if name:
        extra = folder / "additional_chat_templates" / f"{name}.jinja"
        if extra.is_file():
            candidates.append((str(extra.relative_to(folder)), extra.read_text(encoding="utf-8")))
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        candidates.append(("chat_template.jinja", jinja.read_text(encoding="utf-8")))
    ct_json = folder / "chat_template.json"
    if ct_json.is_file():
        raw = json.loads(ct_json.read_text(encoding="utf-8")).get("chat_template")
        candidates.append(("chat_template.json", raw if isinstance(raw, str) else json.dumps(raw)))
    raw_cfg = config.get("chat_template")
    if isinstance(raw_cfg, list):
        named = {t.get("name"): t.get("template") for t in raw_cfg if isinstance(t, dict)}
        candidates.append(("tokenizer_config.json", named.get(name) or named.get("tool_use") or named.get("default")))
    elif isinstance(raw_cfg, str):
        candidates.append(("tokenizer_config.json", raw_cfg))
    for origin, text in candidates:
        if text is not None and (text == template or template in text):
            return origin
    return candidates[0][0] if candidates else "unknown"


def compile_template(spec: str, template: str) -> Any:
    """Compile with transformers' sandboxed environment, under the compile limits (``analysis.compiled_template``);
    syntax errors and a compile past its limits become one-line audit errors."""
    from jinja2 import TemplateError

    from tito_audit import compat
    from tito_audit.rendering.analysis import compiled_template

    try:
        return compiled_template(template)
    except compat.UnsupportedLibrary as exc:
        raise UnsupportedLibrary(spec, str(exc)) from exc
    except TemplateError as exc:
        line = getattr(exc, "lineno", None)
        where = f" (line {line})" if line else ""
        raise TemplateCompileError(spec, f"chat template does not compile{where}: {exc}") from exc
    except RecursionError as exc:
        raise TemplateCompileError(spec, "chat template does not compile: nesting too deep") from exc


def resolve_template_name(spec: str, templates: str | dict[str, str], name: str | None) -> str | None:
    """The name of the template transformers will use for tool conversations, refusing a name the model lacks:
    ``get_chat_template`` would take an unknown name as the template text itself and audit that."""
    names = sorted(templates) if isinstance(templates, dict) else []
    if name is None:
        if not names:
            return None
        return "tool_use" if "tool_use" in names else "default" if "default" in names else None
    if name not in names:
        available = f"available: {', '.join(names)}" if names else "the model has one unnamed template"
        raise UsageError(spec, f"no chat template named {name!r} ({available})")
    return name


def generation_eos_ids_beside(tokenizer: Any) -> tuple[int, ...]:
    """The eos ids of the ``generation_config.json`` (then ``config.json``) beside a tokenizer that did not come
    through ``load`` (a caller's ``AutoTokenizer``): in the folder it was loaded from, or for a Hub repo id in the
    local cache (nothing is downloaded). An engine such as vLLM stops on them by default besides the tokenizer's
    eos (Llama-3.1's ``<|eom_id|>``, Qwen2.5's ``<|endoftext|>``), so a stop the trainer guard must know. () where
    there is none, or it does not parse."""
    name = str(getattr(tokenizer, "name_or_path", "") or "")
    if not name:
        return ()
    parsed: dict[str, Any] = {}
    for file in ("generation_config.json", "config.json"):
        try:
            path: Any = Path(name) / file
            if not path.is_file():
                from huggingface_hub import try_to_load_from_cache

                path = try_to_load_from_cache(name, file) if "/" in name and not Path(name).exists() else None
            if isinstance(path, str | Path) and Path(path).is_file():
                data = json.loads(Path(path).read_text(encoding="utf-8"))
                parsed[file] = data if isinstance(data, dict) else {}
        except (OSError, ValueError, TypeError):  # an unreadable file, a name that is no repo id: nothing known
            continue
    return _generation_eos_ids(tokenizer, parsed)


def _generation_eos_ids(tokenizer: Any, parsed: dict[str, Any]) -> tuple[int, ...]:
    ids: list[int] = []
    for source in (parsed.get("generation_config.json", {}), parsed.get("config.json", {})):
        eos = source.get("eos_token_id")
        if isinstance(eos, int):
            ids.append(eos)
        elif isinstance(eos, list):
            ids.extend(i for i in eos if isinstance(i, int))
    return tuple(dict.fromkeys(ids))


def load_files(
    files: ModelFiles,
    template_name: str | None = None,
    chat_template_file: str | Path | None = None,
) -> LoadedModel:
    """The second half of ``load``: a fetched folder's tokenizer and resolved template (no network)."""
    spec, folder = files.spec, files.folder
    parsed = _validate_json_files(spec, folder)
    config = parsed.get("tokenizer_config.json", {})
    tokenizer = _load_tokenizer(spec, folder, config)

    if chat_template_file is not None:
        path = Path(chat_template_file)
        try:
            template = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(spec, f"cannot read --chat-template {path}: {exc}") from exc
        origin = str(path)
        template_name = None
    else:
        if not tokenizer.chat_template:
            raise NoChatTemplate(spec, "the model has no chat template (none in its tokenizer files)")
        template_name = resolve_template_name(spec, tokenizer.chat_template, template_name)
        try:
            template = tokenizer.get_chat_template(template_name, tools=_TOOLS_PROBE)
        except ValueError as exc:
            raise UsageError(spec, str(exc).splitlines()[0]) from exc
        origin = _template_origin(folder, template, template_name, config)
    if not isinstance(template, str):
        raise NoChatTemplate(spec, f"the chat template is not text ({type(template).__name__} {template!r:.40})")
    if not template.strip():
        raise NoChatTemplate(spec, "the chat template is empty")
    compile_template(spec, template)

    license_ = files.license
    for meta in ("PROVENANCE.json", "SOURCE.json"):
        if license_ is None and (folder / meta).is_file():
            try:
                license_ = json.loads((folder / meta).read_text()).get("license")
            except (json.JSONDecodeError, AttributeError):
                pass

    provenance = Provenance(
        model=spec,
        source=files.source,
        repo_id=files.repo_id,
        revision=files.revision,
        template_file=origin,
        template_name=template_name,
        template_sha256=sha256_text(template),
        tokenizer_class=type(tokenizer).__name__,
        bos_token=tokenizer.bos_token,
        eos_token=tokenizer.eos_token,
        vocab_size=len(tokenizer),
        license=license_,
        files={p.name: _sha256_file(p)[:16] for p in sorted(folder.iterdir()) if p.is_file()},
    )
    return LoadedModel(spec, tokenizer, template, provenance, _generation_eos_ids(tokenizer, parsed))


def model_spec(spec: Any, where: str) -> str | PathLike[str]:
    """``spec`` when ``load`` can read it (a str or a path), else a ``TypeError``."""
    if isinstance(spec, str | PathLike):
        return spec
    raise TypeError(
        f"{where}: a model spec is a Hub id, a local folder or a bundled name (str or path), not {kind_of(spec)}"
    )


def load(
    spec: str,
    offline: bool = False,
    template_name: str | None = None,
    chat_template_file: str | Path | None = None,
) -> LoadedModel:
    """Fetch and load in one call: the one loader of the public API (``tito_audit.load``); the audit, fix, scan,
    replay and rl load through it too."""
    from tito_audit.sources.resolve import fetch_model_files
    from tito_audit.sources.tokenizer import collector_paused

    spec = os.fspath(model_spec(spec, "load"))
    with collector_paused():  # the Hub client's first import, then the tokenizer's (see _load_tokenizer)
        return load_files(fetch_model_files(spec, offline), template_name, chat_template_file)
