"""Template analysis: each template compiled once by transformers, under limits, with a pinned clock, and its
code read once.

A template is compiled by transformers (``_compile_jinja_template``, cached per template text: ``compat``) under
``COMPILE_LIMITS`` (``compiled_template``), and its code is read for hazards (``hazards``), for the literal text
it can write and for the variable names it loads. Those readings need the tree as parsed: jinja's optimizer folds
constant expressions in the tree it compiles, in place. So the parse jinja does for that compile is read as it
comes out of the parser, before the compiler sees it, and no second parse is needed (``template_facts``); a
template compiled before its facts were kept (more than a few templates ago) is parsed once more, with the same
environment.

The compile runs with jinja's optimizer off (``Environment.optimized``). The optimizer is an optimization only:
it folds an expression at compile time where evaluating it then gives what the render would, so the renders are
the same (``tests/rendering/test_renderer_caches.py`` holds them to transformers' own compile on a fourth of the
corpus).
It re-walks every nested expression at every level of the code generator, a fifth of the compile's time on the
corpus (``benchmarks/bench_compile_unpack.py``), for templates an audit renders a hundred times at most; and it
runs less template code while compiling (constant ``{{ output }}`` is still written at compile time, so the
compile limits stay).

``prepare_for_renders`` swaps the pinned ``strftime_now`` (``clock``) into the compiled template's own globals,
so that renders are reproducible without patching the clock, and hardens it (``guard``).
"""

from __future__ import annotations

import sys
import threading
from collections import ChainMap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, NoReturn

from jinja2 import TemplateError, nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tito_audit import compat
from tito_audit.rendering.bounded_cache import BoundedCache
from tito_audit.rendering.clock import pinned_strftime
from tito_audit.rendering.compared_literals import compared_literals
from tito_audit.rendering.guard import RenderLimits, RenderTimeout, harden_environment, render_limits
from tito_audit.rendering.hazards import Hazard, find_hazards
from tito_audit.rendering.message_reads import MessageReads, read_messages
from tito_audit.rendering.read_keys import read_keys
from tito_audit.rendering.sandbox_decisions import memoize_decisions
from tito_audit.rendering.switch_reads import read_switches
from tito_audit.rendering.tree_order import descendants

# Every node type some reading of a template's code looks at (one walk of the tree finds them all, in order).
ANALYSED_NODES = (nodes.Getattr, nodes.Getitem, nodes.Filter, nodes.Call, nodes.Name, nodes.Const, nodes.TemplateData)


@dataclass(frozen=True)
class TemplateFacts:
    """What a template's code says, read from its tree as parsed; ``walked`` is False where the tree is nested too
    deep to walk (then each reading raises, as walking it would)."""

    hazards: tuple[Hazard, ...]
    literals: tuple[str, ...]  # its literal output text, then its string constants, in tree order
    loaded_names: frozenset[str]  # every variable name it reads anywhere
    walked: bool = True
    reads: MessageReads = field(default_factory=MessageReads)  # the message keys it reads, the literals it tests
    # every variable it compares or tests, with the values it tests it against (``switch_reads``)
    switches: tuple[tuple[str, tuple[Any, ...]], ...] = ()

    @property
    def literal_text(self) -> str:
        """Its literal output text and string constants, joined (what it can write without data)."""
        return "\n".join(self.literals)

    def checked(self) -> TemplateFacts:
        if not self.walked:
            raise RecursionError("template nested too deep to read its code")
        return self


def read_tree(tree: nodes.Template) -> TemplateFacts:
    """The facts of one freshly parsed tree (before any compiler folds it); raises RecursionError where it is
    nested too deep to walk."""
    everything = descendants(tree)  # one walk, each reading keeps the kinds of node it wants
    found = [n for n in everything if isinstance(n, ANALYSED_NODES)]
    hazards = tuple(find_hazards(found))
    parts = [n.data for n in found if isinstance(n, nodes.TemplateData)]
    parts += [n.value for n in found if isinstance(n, nodes.Const) and isinstance(n.value, str)]
    names = frozenset(n.name for n in found if isinstance(n, nodes.Name) and n.ctx == "load")
    reads, switches = read_messages(tree, everything), read_switches(tree, everything)
    return TemplateFacts(hazards, tuple(parts), names, reads=reads, switches=switches)


class _Compile:
    """What the compile under way (one at a time per process: ``_COMPILING``) wants: where to keep the facts read as
    the template is parsed, and the compile's limits."""

    into: dict[str, TemplateFacts] | None = None
    limits: RenderLimits | None = None
    parsing: str | None = None  # the template whose tree the compile is generating code for


class _ReadingEnvironment(ImmutableSandboxedEnvironment):
    """transformers' sandboxed environment, as ``compiled_template`` has transformers build it for a template: the
    template is read (``read_tree``) as it is parsed, compiled under the compile's limits, and without jinja's
    optimizer (see the module's docstring). Renders are the sandbox's own: nothing else is overridden, and the
    parse and compile hooks do nothing outside a ``compiled_template`` call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.optimized = False

    def _generate(self, source: nodes.Template, *args: Any, **kwargs: Any) -> str:
        code = super()._generate(source, *args, **kwargs)
        if _Compile.into is not None and _Compile.parsing is not None:
            _keep(_CODE, _Compile.parsing, code)  # the Python code it compiles to (``template_code``)
        return code

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        if _Compile.into is None:
            return tree
        _Compile.parsing = source
        try:
            facts = read_tree(tree)
        except Exception:  # reading is best effort here (deep inside the compile): template_facts parses again
            return tree
        _keep(_Compile.into, source, facts)
        return tree

    def from_string(self, source: Any, *args: Any, **kwargs: Any) -> Any:
        if _Compile.limits is None:
            return super().from_string(source, *args, **kwargs)
        limits = render_limits(_Compile.limits)
        try:
            with limits:
                return super().from_string(source, *args, **kwargs)
        except RenderTimeout:
            limits.__exit__()  # raised as the block was left, before its ``__exit__`` could run (``guard.time_limit``)
            raise


@contextmanager
def _compiling(into: dict[str, TemplateFacts], limits: RenderLimits) -> Iterator[None]:
    """While open, a template transformers compiles is compiled by ``_ReadingEnvironment``: under ``limits``, and
    read as it is parsed. A template transformers has compiled before (its cache) is neither.

    transformers builds each template's environment from the class its module names; the module's name points at
    the subclass for the duration of one ``compiled_template`` call. No class of jinja's is changed: in a library
    caller's process, another thread that compiles a template of its own meanwhile gets jinja's environment as it
    is, not this compile's limits and reading. Where transformers builds its environment another way
    (``compat``'s ``compile_hook``), the whole compile runs under ``limits`` instead, with jinja's optimizer, and
    ``template_facts`` parses the template once more."""
    hook = compat.pieces("compile_hook")
    if hook is None:
        bounded = render_limits(limits)
        try:
            with bounded:
                yield
        except RenderTimeout:
            bounded.__exit__()  # as in ``_ReadingEnvironment.from_string``
            raise
        return
    hook.module.ImmutableSandboxedEnvironment = _ReadingEnvironment
    _Compile.into, _Compile.limits = into, limits
    try:
        yield
    finally:
        hook.module.ImmutableSandboxedEnvironment = hook.environment
        _Compile.into = _Compile.limits = _Compile.parsing = None


# Compiling runs template code: jinja folds constant expressions (``'ab' * 10**9``) while it compiles. So a
# compile is bounded as a render is, with more time (a large template takes a second to compile), and with the
# memory budget of the renders that follow (none for a library caller's renderer: ``Renderer`` passes its own).
COMPILE_LIMITS = RenderLimits(seconds=10.0)
_FAILED: dict[str, TemplateError] = {}  # templates whose compile hit a limit: not compiled again (last few kept)
_PARSED: dict[str, TemplateFacts] = {}  # facts read while compiling, until ``template_facts`` takes them
_CODE: dict[str, str] = {}  # the Python code the last few templates compiled to (``template_code``)
_KEPT = 16
_COMPILING = threading.Lock()  # the hooks are set on the environment class: one compile at a time


def _keep(memo: dict[str, Any], template: str, value: Any) -> None:
    """``memo[template] = value``, the oldest entries dropped past ``_KEPT``."""
    while len(memo) >= _KEPT:
        del memo[next(iter(memo))]
    memo[template] = value


class CompileLimitError(TemplateError):
    """Compiling a template ran past its time or memory budget (a ``TemplateError``: it does not compile)."""


def compiled_template(template: str, memory_bytes: int | None = None) -> Any:
    """transformers' compiled template (its cache), compiled under ``COMPILE_LIMITS`` (``memory_bytes``: another
    memory budget; 0 for none) when it is not in the cache; raises a ``TemplateError`` where it does not parse or
    its compile hits a limit. Where jinja's constant folding runs out of memory it leaves the expression to the
    render, which its own limits bound."""
    compile_ = compat.compile_cache().compile
    failed = _FAILED.get(template)
    if failed is not None:
        raise failed
    limits = COMPILE_LIMITS if memory_bytes is None else replace(COMPILE_LIMITS, memory_bytes=memory_bytes)
    try:
        with _COMPILING, _compiling(_PARSED, limits):
            return compile_(template)
    except RenderTimeout:
        error = CompileLimitError(f"compiling took more than {COMPILE_LIMITS.seconds:g}s of CPU time")
    except MemoryError:
        error = CompileLimitError("compiling exhausted its memory budget")
    _keep(_FAILED, template, error)
    raise error


@lru_cache(maxsize=8)
def template_facts(template: str) -> TemplateFacts:
    """The facts of a template, from the parse of its compile when that happens now, else from one more parse by
    the environment it was compiled with (so that its ``{% generation %}`` and loop-control tags parse). Raises
    ``TemplateSyntaxError`` where it does not parse."""
    compiled = compiled_template(template)
    facts = _PARSED.pop(template, None)
    if facts is None:
        tree = compiled.environment.parse(template)
        try:
            facts = read_tree(tree)
        except RecursionError:
            facts = TemplateFacts((), (template,), frozenset(), walked=False)
    return facts


def prepare_for_renders(template: str, limits: RenderLimits | None = None) -> None:
    """Ready the compiled template for an audit's renders: ``strftime_now`` at the pinned date
    (``clock.pinned_date``), a hardened environment (``guard``), errors that come out as raised
    (``_raise_as_raised``), and three changes that leave every render's output as it was: flat globals, a
    memoized ``tojson`` (``_memoized_tojson``) and the sandbox's attribute decisions made once per type and name
    (``sandbox_decisions``). ``limits``: the renders' (their memory budget is the compile's)."""
    compiled = compiled_template(template, None if limits is None else limits.memory_bytes)
    env = compiled.environment
    env.globals["strftime_now"] = pinned_strftime
    if isinstance(compiled.globals, ChainMap):
        # jinja looks the template's globals up through a ChainMap (its own over the environment's) and copies them
        # into every render's context key by key in Python. transformers gives each template an environment of its
        # own that nothing changes after this, so a flat dict with the same entries is the same lookup, copied in C.
        compiled.globals = dict(compiled.globals)
    compiled.globals["strftime_now"] = pinned_strftime
    harden_environment(env)
    memoize_decisions(env)
    env.handle_exception = _raise_as_raised
    tojson = env.filters.get("tojson")
    if tojson is not None and not getattr(tojson, "memoized", False):
        env.filters["tojson"] = _memoized_tojson(tojson)


def transformers_compiles() -> int:
    """How many templates transformers has compiled so far (misses of its compile cache, which keeps 128): a
    renderer whose count is behind prepares its template again (``prepare_for_renders`` is idempotent), since
    transformers may have dropped the prepared one and compiled it anew, unprepared (the real clock, a sandbox
    that answers unsafe access with a silent undefined). Asked before every render: the cache's ``cache_info`` is
    looked up once (an import statement costs more than the question)."""
    return int(_compile_cache_info()().misses)


@lru_cache(maxsize=1)
def _compile_cache_info() -> Any:
    return compat.compile_cache().cache_info


def _memoized_tojson(tojson: Any) -> Any:
    """transformers' ``tojson`` filter (``json.dumps``, with indent in pure Python), kept per content key of its
    arguments (``bounded_cache.content_key``: every value with its exact type, so equal keys give equal JSON): an
    audit renders the same tool schemas hundreds of times. Arguments without a key (jinja's undefined, namespaces,
    subclasses) and calls that raise go to the filter every time. One memo per template, as its render caches."""
    texts = BoundedCache(256, 1_000_000)

    def write(call: tuple[tuple[Any, ...], dict[str, Any]]) -> Any:
        return tojson(*call[0], **call[1])

    def memoized(*args: Any, **kwargs: Any) -> Any:
        return texts.by_content((args, kwargs), write, len)

    memoized.memoized = True  # type: ignore[attr-defined]
    return memoized


def _raise_as_raised(source: str | None = None) -> NoReturn:
    """``Environment.handle_exception`` for renders, without jinja's rewrite of the traceback into template lines
    (it compiles a fake code object per template frame, a good part of a render that raises, and an audit renders
    hundreds that do: strict templates raise for every shape they reject). The exception is the render's own, its
    type and message unchanged; the renderer keeps only those. Set after the compile, whose syntax errors jinja
    still translates."""
    error = sys.exc_info()[1]
    assert error is not None  # called from an except block
    raise error


def hazards(source: str) -> list[Hazard]:
    """Hazards found in the template's syntax tree (empty when it does not parse: compiling reports that)."""
    try:
        facts = template_facts(source)
    except Exception:
        return []
    return list(facts.checked().hazards)


def literal_text(source: str) -> str:
    """The template's literal output text and string constants, joined (the raw text where it does not parse)."""
    try:
        facts = template_facts(source)
    except Exception:
        return source
    return facts.checked().literal_text


def template_literals(source: str) -> tuple[str, ...]:
    """The template's literal output text and string constants, in tree order (nothing where it does not parse)."""
    try:
        return template_facts(source).checked().literals
    except Exception:
        return ()


def message_reads(template: str) -> MessageReads:
    """The message keys a template reads and the literals it tests text with (``message_reads``); nothing where it
    does not parse or its tree cannot be walked."""
    try:
        return template_facts(template).checked().reads
    except Exception:
        return MessageReads()


def loaded_names(template: str) -> frozenset[str]:
    """Every variable name the template reads anywhere (a superset of ``template_variables``); raises where the
    template does not parse or its tree cannot be walked."""
    return template_facts(template).checked().loaded_names


def template_switches(template: str) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """Every variable the template compares or tests, with the values it tests it against (``switch_reads``; the
    caller keeps its context variables); nothing where it does not parse or its tree cannot be walked."""
    try:
        return template_facts(template).checked().switches
    except Exception:
        return ()


def template_code(template: str) -> str:
    """The Python code jinja generated for the template's compile (kept from the compile itself; generated again,
    by the environment it was compiled with, for a template compiled more than a few templates ago). Raises where
    it does not compile."""
    compiled = compiled_template(template)
    code = _CODE.get(template)
    if code is None:
        code = compiled.environment.compile(template, raw=True)
        _keep(_CODE, template, code)
    return str(code)


@lru_cache(maxsize=4)
def _search_tree(template: str) -> nodes.Template:
    """The template's syntax tree for the search's readings (``template_compared_literals``, ``template_read_keys``):
    parsed once for both, by the environment it was compiled with. The readings only walk it."""
    return compiled_template(template).environment.parse(template)


def template_compared_literals(template: str) -> tuple[str, ...]:
    """The string constants the template compares a whole text with (``compared_literals``); nothing where it does
    not parse or its tree cannot be walked. Read for the search only (the scan plays none): not one of the facts."""
    try:
        return compared_literals(_search_tree(template))
    except Exception:
        return ()


def template_read_keys(template: str) -> tuple[str, ...]:
    """The names the template reads as keys (``read_keys``); nothing where it does not parse or its tree cannot be
    walked. Read for the search only (the scan plays none): not one of the facts."""
    try:
        return read_keys(_search_tree(template))
    except Exception:
        return ()


def template_variables(template: str) -> frozenset[str]:
    """Variables a template reads from its context (what ``transformers``' ``_get_template_variables`` returns)."""
    from jinja2 import meta

    return frozenset(meta.find_undeclared_variables(compiled_template(template).environment.parse(template)))
