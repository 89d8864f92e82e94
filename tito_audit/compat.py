"""Every private transformers, jinja2, hypothesis or interpreter name tito-audit uses, behind one capability probe
each.

tito-audit renders templates exactly as ``apply_chat_template`` does, and to do it fast it reaches into the
libraries' private pieces (transformers' compile cache, its input preparation, its control-token marking, its
Rust backend calls; jinja's parse hook); and its counterexample search keeps hypothesis from drawing the constants
of whatever modules the process has loaded (``search_constants``: without it, one seed draws other conversations
from another entry point). A private name can change in any release, so no module of tito-audit
imports one: each asks here, by capability. A capability is probed once per process, on first use (importing
this module imports neither library), and where its pieces are missing, or their shape changed, its fallback
runs instead: a public path that gives the same reports, only slower (each fallback says which). The one
exception is ``search_constants``, whose fallback gives the same reports only from the same entry point: the
report names it, as every fallback that ran.
``compile_cache`` has no such fallback: without transformers' compile cache a template's clock cannot be pinned
in the renders transformers does itself, so its absence is an error that names the capability and the range
tito-audit supports, for every model, never a silently different verdict.

Reports name the capabilities that ran on their fallback (``library_versions``), beside the library versions.
``TITO_AUDIT_COMPAT_FALLBACK=all`` (or a comma-separated list of capability names) forces fallbacks:
``tests/test_compat.py`` audits with every fallback forced and compares the reports with the fast paths'.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from types import SimpleNamespace
from typing import Any

from tito_audit._version import __version__

FALLBACK_ENV = "TITO_AUDIT_COMPAT_FALLBACK"
SUPPORTED = "transformers>=5.23 (see pyproject.toml)"
LIBRARIES = ("transformers", "tokenizers", "jinja2")
# What else a verdict depends on, named in every report with the above: the counterexample search's draws are
# hypothesis' (one seed gives the same conversations on one hypothesis release).
SEARCH_LIBRARY = "hypothesis"


@dataclass(frozen=True)
class Capability:
    """A group of private names used together, and what runs without them ("" where nothing can)."""

    name: str
    uses: str
    fallback: str
    library: str = "transformers"  # probed (and reported) only in a process that has imported it


CAPABILITIES = {
    c.name: c
    for c in (
        Capability(
            "compile_cache",
            "transformers chat_template_utils._compile_jinja_template (its lru_cache: the compiled template "
            "apply_chat_template renders, prepared once with the pinned clock)",
            "",
        ),
        Capability(
            "compile_hook",
            "transformers chat_template_utils.ImmutableSandboxedEnvironment (swapped for one compile), "
            "jinja2 Environment._parse",
            "the compile runs as one bounded call with jinja's optimizer on, and the template is parsed once more "
            "to read its code",
        ),
        Capability(
            "fast_inputs",
            "transformers chat_template_utils._plain_template_data, _alias_reasoning_fields, "
            "_normalize_chat_messages (5.24; the 5.23 inline equivalent otherwise)",
            "apply_chat_template(tokenize=False) prepares every input on every render",
        ),
        Capability(
            "control_token_marking",
            "transformers chat_template_utils._get_control_token_patterns, mark_control_tokens, "
            "encode_marked_chat(tokenizer, chat), _CONTROL_TOKEN_START/_END; the tokenizer's _get_control_tokens "
            "and _encode_without_added_tokens",
            "apply_chat_template(tokenize=True, sanitize_control_tokens=True) marks and encodes every render",
        ),
        Capability(
            "direct_tokenizer",
            "transformers TokenizersBackend._encode_plus and _decode (compared with the tokenizer's own, to call "
            "the Rust backend directly)",
            "the tokenizer's public encode and decode",
        ),
        Capability(
            "declared_tokenizer_class",
            "transformers TokenizersBackend._tokenizer_json_has_byte_level, utils.hub.resolve_revision, "
            "import_utils.define_import_structure, from_pretrained(_from_auto=, _commit_hash=)",
            "AutoTokenizer.from_pretrained loads every tokenizer (a slower cold start)",
        ),
        Capability(
            "search_constants",
            "hypothesis internal.conjecture.providers._get_local_constants and CONSTANTS_CACHE (swapped for the "
            "search: no constants of the modules the process has loaded are drawn)",
            "hypothesis draws constants of the modules the process has loaded: one seed may draw other "
            "conversations from another entry point (a script, the CLI, a test run)",
            SEARCH_LIBRARY,
        ),
        Capability(
            "exit_handlers",
            "CPython atexit._run_exitfuncs (the exit handlers run, then os._exit, after a Ctrl-C the command answered)",
            "sys.exit: the exit handlers run as usual, and after a Ctrl-C the command answered CPython may end the "
            "process by SIGINT once it has finalized (exit -2, not 130)",
            "atexit",
        ),
    )
}


class UnsupportedLibrary(RuntimeError):
    """A capability without a fallback is missing from the installed transformers or jinja2."""


def forced_fallbacks() -> frozenset[str]:
    """Capabilities whose fallback ``TITO_AUDIT_COMPAT_FALLBACK`` forces (read at each probe; probes are cached):
    ``all`` is every capability that has a fallback; one without (``compile_cache``) is forced by its name only."""
    raw = os.environ.get(FALLBACK_ENV, "")
    names = {n.strip() for n in raw.split(",") if n.strip()}
    if "all" in names:
        names |= {name for name, c in CAPABILITIES.items() if c.fallback}
    return frozenset(names & set(CAPABILITIES))


_PROBES: dict[str, Callable[[], Any]] = {}


def _probe(name: str) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    def register(function: Callable[[], Any]) -> Callable[[], Any]:
        _PROBES[name] = function
        return function

    return register


@cache
def pieces(name: str) -> Any:
    """The private pieces of capability ``name`` (a namespace), or None where they are missing or forced off.
    Probed once per process."""
    if name in forced_fallbacks():
        return None
    try:
        return _PROBES[name]()
    except (ImportError, AttributeError, TypeError, ValueError):
        return None


def available(name: str) -> bool:
    return pieces(name) is not None


def reset() -> None:
    """Probe again on next use (tests that force a fallback)."""
    pieces.cache_clear()


def fallbacks() -> list[str]:
    """The capabilities running on their fallback in this process (a probe of each whose library it imported: a
    process that never searched has not imported hypothesis, and its reports rest on no search to name)."""
    return [name for name, c in CAPABILITIES.items() if c.library in sys.modules and not available(name)]


def _ctu() -> Any:
    from transformers.utils import chat_template_utils

    return chat_template_utils


@_probe("compile_cache")
def _compile_cache() -> Any:
    compile_ = _ctu()._compile_jinja_template
    if not callable(getattr(compile_, "cache_info", None)) or not callable(getattr(compile_, "cache_clear", None)):
        return None
    return SimpleNamespace(compile=compile_, cache_info=compile_.cache_info)


@_probe("compile_hook")
def _compile_hook() -> Any:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    ctu = _ctu()
    if getattr(ctu, "ImmutableSandboxedEnvironment", None) is not ImmutableSandboxedEnvironment:
        return None  # transformers builds its environment another way
    if list(inspect.signature(ImmutableSandboxedEnvironment._parse).parameters) != [
        "self",
        "source",
        "name",
        "filename",
    ]:
        return None
    return SimpleNamespace(module=ctu, environment=ImmutableSandboxedEnvironment)


def _drop_none_keys(conversation: Any) -> list[dict[str, Any]]:
    """transformers 5.23's normalization, inline in its ``apply_chat_template``: each message without its keys whose
    value is None. Used only where a tokenizer class's renders are checked to match (``template_inputs``)."""
    return [{k: v for k, v in message.items() if v is not None} for message in conversation]


@_probe("fast_inputs")
def _fast_inputs() -> Any:
    ctu = _ctu()
    normalize = getattr(ctu, "_normalize_chat_messages", None) or _drop_none_keys
    return SimpleNamespace(plain=ctu._plain_template_data, alias=ctu._alias_reasoning_fields, normalize=normalize)


@_probe("control_token_marking")
def _control_token_marking() -> Any:
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    ctu = _ctu()
    encode = ctu.encode_marked_chat
    if list(inspect.signature(encode).parameters) != ["tokenizer", "chat"]:
        return None  # 5.22 took the markers pattern as a third argument
    if not callable(PreTrainedTokenizerBase._get_control_tokens):
        return None
    if not hasattr(PreTrainedTokenizerBase, "_encode_without_added_tokens"):
        return None
    return SimpleNamespace(
        patterns=ctu._get_control_token_patterns,
        mark=ctu.mark_control_tokens,
        encode=encode,
        markers=(ctu._CONTROL_TOKEN_START, ctu._CONTROL_TOKEN_END),
        base=PreTrainedTokenizerBase,
    )


@_probe("direct_tokenizer")
def _direct_tokenizer() -> Any:
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    return SimpleNamespace(
        backend_class=TokenizersBackend,
        encode_plus=TokenizersBackend._encode_plus,
        decode=TokenizersBackend._decode,
        base=PreTrainedTokenizerBase,
    )


@_probe("declared_tokenizer_class")
def _declared_tokenizer_class() -> Any:
    from transformers.tokenization_utils_tokenizers import TokenizersBackend
    from transformers.utils import import_utils
    from transformers.utils.hub import resolve_revision

    scan = import_utils.define_import_structure

    @contextmanager
    def scanning_with(replacement: Callable[..., Any]) -> Iterator[None]:
        """transformers' import-structure scan replaced by ``replacement`` for the block."""
        import_utils.define_import_structure = replacement  # type: ignore[assignment]
        try:
            yield
        finally:
            import_utils.define_import_structure = scan

    return SimpleNamespace(
        byte_level=TokenizersBackend._tokenizer_json_has_byte_level,
        revision_of=resolve_revision,
        import_utils=import_utils,
        scan_import_structure=scan,
        scanning_with=scanning_with,
    )


def compile_cache() -> Any:
    """transformers' cached compile (``compile``, ``cache_info``); raises ``UnsupportedLibrary`` without it."""
    found = pieces("compile_cache")
    if found is None:
        why = f"{FALLBACK_ENV} turns it off" if "compile_cache" in forced_fallbacks() else "it is missing"
        raise UnsupportedLibrary(
            f"tito-audit needs transformers' chat_template_utils._compile_jinja_template (its compile cache) to pin "
            f"a template's clock, and in transformers {_version('transformers')} {why}; install {SUPPORTED}"
        )
    return found


def library_versions() -> dict[str, Any]:
    """What produced a report: tito-audit's version, the installed transformers, tokenizers and jinja2, and the
    capabilities that ran on their fallback (named, so that a slower or different path is never silent). In a
    process that has not imported transformers, nothing has rendered: no rendering fallback ran, and none is probed
    (the probe would import transformers, a second of a Ctrl-C or of a run whose every model failed to load)."""
    out: dict[str, Any] = dict(_versions())
    out["compat_fallbacks"] = fallbacks()
    return out


@cache
def _versions() -> dict[str, str]:
    return {"tito-audit": __version__, **{name: _version(name) for name in (*LIBRARIES, SEARCH_LIBRARY)}}


def versions_line() -> str:
    """``tito-audit 0.x, transformers 5.24.0, tokenizers 0.23.3, jinja2 3.1.6, hypothesis 6.170.17`` (and the
    fallbacks, if any)."""
    found = library_versions()
    line = ", ".join(f"{name} {found[name]}" for name in ("tito-audit", *LIBRARIES, SEARCH_LIBRARY))
    if found["compat_fallbacks"]:
        line += f"; fallbacks: {', '.join(found['compat_fallbacks'])}"
    return line


@_probe("search_constants")
def _search_constants() -> Any:
    from hypothesis.internal.conjecture import providers

    # both are module globals the provider reads at each draw (``HypothesisProvider._maybe_draw_constant``)
    if not callable(providers._get_local_constants) or not hasattr(providers.CONSTANTS_CACHE, "__setitem__"):
        return None
    empty = providers.Constants()
    cache_type = type(providers.CONSTANTS_CACHE)
    if not callable(getattr(empty, "set_for_type", None)) or not hasattr(cache_type(1024), "__setitem__"):
        return None
    lock = threading.Lock()
    state: dict[str, Any] = {"depth": 0, "saved": None}

    @contextmanager
    def without_local_constants() -> Iterator[None]:
        """For the block, hypothesis draws no constant of the process' own modules (only its fixed global ones),
        from a constants cache of its own (the process' holds what earlier draws saw of the local ones). The swap
        is process-wide: the first block to enter makes it and the last to leave undoes it, whatever thread each
        runs in (searches of two threads overlap without one undoing the other's)."""
        with lock:
            if state["depth"] == 0:
                state["saved"] = providers._get_local_constants, providers.CONSTANTS_CACHE
                providers._get_local_constants = lambda: empty
                providers.CONSTANTS_CACHE = cache_type(1024)
            state["depth"] += 1
        try:
            yield
        finally:
            with lock:
                state["depth"] -= 1
                if state["depth"] == 0:
                    providers._get_local_constants, providers.CONSTANTS_CACHE = state["saved"]

    return SimpleNamespace(without_local_constants=without_local_constants)


@_probe("exit_handlers")
def _exit_handlers() -> Any:
    import atexit

    run = atexit._run_exitfuncs  # CPython's; an AttributeError elsewhere is the fallback
    if not callable(run):
        return None
    return SimpleNamespace(run=run)


def exit_now(code: int) -> None:
    """End the process with ``code``: the streams flushed and the exit handlers run (temporary folders removed),
    then ``os._exit``, so that nothing the interpreter does at its teardown can choose another status. On the
    fallback (``exit_handlers`` missing or forced off), ``sys.exit(code)``."""
    found = pieces("exit_handlers")
    if found is None:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    found.run()
    os._exit(code)


@contextmanager
def reproducible_search() -> Iterator[None]:
    """A block in which hypothesis' draws depend only on the seed and its release (``search_constants``), or, on
    its fallback, the block as it is (the report names the fallback)."""
    found = pieces("search_constants")
    if found is None:
        yield
        return
    with found.without_local_constants():
        yield


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


# -- transformers' no-torch advisory ----------------------------------------------------------------------
# transformers announces at import that PyTorch is missing. tito-audit needs torch only for ``tito-audit rl``
# (which says so itself), so on the default install that line is noise on every command and breaks the
# one-line-on-stderr promise. Only that advisory is dropped; every other transformers message stays.

NO_TORCH_ADVICE = "PyTorch was not found"


class _NoTorchAdvice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(NO_TORCH_ADVICE)


def quiet_transformers() -> None:
    """Filter the advisory on transformers' library logger (before transformers is imported)."""
    logger = logging.getLogger("transformers")
    if not any(isinstance(f, _NoTorchAdvice) for f in logger.filters):
        logger.addFilter(_NoTorchAdvice())


quiet_transformers()  # on import: ``tito_audit/__init__`` imports this module before anything imports transformers
