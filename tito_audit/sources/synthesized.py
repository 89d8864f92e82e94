"""A tokenizer synthesized from a template's own control tokens, for a template that no tokenizer at hand matches.

What decides most TITO properties is the template's structure and whether its control tokens are atomic, not
the exact merges of the BPE. So a template whose vocabulary is not at hand is audited on a real base tokenizer
to which the control-token text it writes is added as atomic special tokens: the literals shaped like known
control tokens (``<|eot_id|>``, ``[INST]``...) and the control words it writes in a role position, whatever their
shape (``<|turn>``, ``[e~[``, ``<seed:eos>``: ``control_tokens.role_literals``); ``bos_token``/``eos_token`` are the
base's (a placeholder special token where the base has none). Stop tokens are then derived exactly as for a real
tokenizer (``rollout.stop``): where the template closes an assistant turn, plus eos.

The base is derived from the template, never from a model name (``choose_base``): the candidate that already
has most of the template's control tokens as single tokens, then defines the special-token variables the template
reads, then gives back the template's literal text exactly after encode and decode, then encodes that text in the
fewest tokens; ties go to the order the candidates were given.

Every such verdict is approximate: ``provenance.tokenizer`` is ``"synthesized"`` and names the base, and the
checks declared ``merge_dependent`` (``@check``; measured: ``benchmarks/bench_synthesized.py``) are
``not_applicable``; ``checks.base.run_check`` applies it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tito_audit.sources.control_tokens import read_special_variables
from tito_audit.sources.load import SYNTHESIZED, LoadedModel, Provenance, sha256_text


def template_controls(template: str, roles: Iterable[str] = ()) -> list[str]:
    """The control-token text a template writes (literal text and string constants, then ``roles``: its role
    literals, ``control_tokens.role_literals``), in order of appearance."""
    from tito_audit.rendering.analysis import literal_text
    from tito_audit.sources.control_tokens import template_literals

    return template_literals(literal_text(template), roles)


def template_roles(template: str, candidates: Mapping[str, LoadedModel]) -> list[str]:
    """The template's role literals (``control_tokens.role_literals``), read on the first candidate that defines
    every special-token variable it reads (the words differ between tokenizers only where those variables are
    written, and those are not the template's literals)."""
    from tito_audit.rendering.renderer import Renderer
    from tito_audit.sources.control_tokens import role_literals

    if not candidates:
        return []
    wanted = read_special_variables(template)
    models = list(candidates.values())
    model = next((m for m in models if all(getattr(m.tokenizer, v, None) is not None for v in wanted)), models[0])
    try:
        return role_literals(Renderer(model.tokenizer, template))
    except Exception:  # a template that cannot be prepared: the audit says so
        return []


@dataclass(frozen=True)
class BaseFit:
    """How well one candidate tokenizer fits a template it does not match; larger ``key`` fits better."""

    name: str
    atomic: int  # the template's control tokens the candidate already has as single tokens
    provides: int  # the special-token variables the template reads that the candidate defines
    lossless: bool  # decode(encode(literal text)) gives the literal text back
    tokens: int  # tokens of the template's literal text (fewer: the vocabulary fits its language)
    order: int

    @property
    def key(self) -> tuple[int, int, bool, int, int]:
        return (self.atomic, self.provides, self.lossless, -self.tokens, -self.order)

    @property
    def reason(self) -> str:
        return (
            f"base {self.name}: {self.atomic} of the template's control tokens already atomic, defines "
            f"{self.provides} special-token variable(s) it reads, "
            f"{'lossless' if self.lossless else 'lossy'} on its text ({self.tokens} tokens)"
        )


@dataclass(frozen=True)
class _Reading:
    """What fitting reads of a template, read once for all the candidates: its control-token literals, the
    special-token variables it reads, and its literal text with each control literal replaced by a newline."""

    controls: tuple[str, ...]
    specials: tuple[str, ...]
    text: str

    @classmethod
    def of(cls, template: str, roles: Iterable[str] = ()) -> _Reading:
        from tito_audit.rendering.analysis import literal_text

        controls = tuple(template_controls(template, roles))
        text = literal_text(template)
        for t in controls:
            text = text.replace(t, "\n")
        return cls(controls, tuple(read_special_variables(template)), text)


def _atomic_and_provides(tokenizer: Any, reading: _Reading, hidden: frozenset[str]) -> tuple[int, int]:
    """``BaseFit.atomic`` and ``BaseFit.provides``: the two leading criteria, which need no encoding."""
    from tito_audit.sources.control_tokens import token_in_vocab

    atomic = sum(1 for t in reading.controls if t not in hidden and token_in_vocab(tokenizer, t))
    provides = sum(1 for v in reading.specials if getattr(tokenizer, v, None) is not None)
    return atomic, provides


def fit(
    name: str,
    tokenizer: Any,
    template: str,
    order: int = 0,
    hidden: frozenset[str] = frozenset(),
    roles: Iterable[str] = (),
) -> BaseFit:
    """``hidden``: tokens added to the tokenizer by synthesis (not its own); ``roles``: the template's role
    literals."""
    reading = _Reading.of(template, roles)
    return _encoded_fit(name, tokenizer, reading, order, _atomic_and_provides(tokenizer, reading, hidden))


def _encoded_fit(name: str, tokenizer: Any, reading: _Reading, order: int, leading: tuple[int, int]) -> BaseFit:
    """``fit``, given its two leading criteria: the template's literal text encoded and decoded."""
    from tito_audit.rendering.tokenizer_cache import tokenizer_cache

    cache = tokenizer_cache(tokenizer)  # the tokenizer's own encode and decode, without the Python around them
    ids = cache.encode(reading.text)
    back = cache.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    atomic, provides = leading
    return BaseFit(
        name=name, atomic=atomic, provides=provides, lossless=back == reading.text, tokens=len(ids), order=order
    )


def choose_base(template: str, candidates: Mapping[str, LoadedModel], roles: Iterable[str] | None = None) -> BaseFit:
    """The candidate that fits ``template`` best (see the module's docstring). Only the candidates that lead on
    the criteria that need no encoding are encoded: the others cannot win. ``roles``: the template's role literals
    (read here when not given)."""
    if not candidates:
        raise ValueError("no candidate tokenizers to synthesize from")
    reading = _Reading.of(template, template_roles(template, candidates) if roles is None else roles)
    leading = {name: _atomic_and_provides(m.tokenizer, reading, m.hidden_specials) for name, m in candidates.items()}
    best = max(leading.values())
    fits = [
        _encoded_fit(name, m.tokenizer, reading, i, best)
        for i, (name, m) in enumerate(candidates.items())
        if leading[name] == best
    ]
    return max(fits, key=lambda f: f.key)


PLACEHOLDERS = {"bos_token": "<|bos_token|>", "eos_token": "<|eos_token|>"}  # for a base without bos / eos


def _add(tokenizer: Any, tokens: Iterable[str]) -> frozenset[str]:
    """Add ``tokens`` the tokenizer lacks as atomic special tokens (in place); the ones added."""
    from tokenizers import AddedToken

    from tito_audit.sources.control_tokens import token_in_vocab

    new = [t for t in dict.fromkeys(tokens) if not token_in_vocab(tokenizer, t)]
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in new], special_tokens=True)
    return frozenset(new)


def template_eos(tokenizer: Any, template: str) -> str | None:
    """The eos of the synthesized model: the base's eos where the template writes ``eos_token`` (it shows where eos
    goes, not its text), else the control word the template ends an assistant turn with (what a model whose
    template never writes eos has as eos: ``<|im_end|>``, ``<|eot_id|>``); None: keep the base's (also where the
    template ends turns only with the next turn's opener, which is a stop but no eos)."""
    from tito_audit.rendering.renderer import Renderer
    from tito_audit.rollout.stop import single_token
    from tito_audit.rollout.turn_roles import AFTER_TURN, ANSWER, turn_roles

    if "eos_token" in read_special_variables(template):
        return None
    try:
        renderer = Renderer(tokenizer, template)
        roles = turn_roles(renderer)
        if roles.convention_of(ANSWER) != AFTER_TURN:
            return None
        end = roles.end_of(ANSWER)
    except Exception:  # a template that cannot render: the audit says so
        return None
    return end if end is not None and single_token(tokenizer, end) is not None else None


def copy_tokenizer(tokenizer: Any) -> Any:
    """``copy.deepcopy(tokenizer)`` where tokens are only to be added to the copy, in milliseconds instead of
    seconds: a deep copy re-serializes the Rust backend (its whole vocabulary and merges, through JSON) and copies
    the Python-side vocabulary dicts. Here the copy gets a new backend that shares the base's model, normalizer,
    pre-tokenizer, post-processor and decoder (none of which adding tokens changes) and re-adds the base's added
    tokens in id order; the Python object is copied one level deep, as ``_with_specials`` does (adding tokens to a
    fast tokenizer changes only its backend). Where the new backend's added tokens do not come out with the base's
    ids, or the backend truncates or pads, it is the deep copy. ``tests/sources/test_synthesized.py`` holds the new
    backend to the base's serialization."""
    backend = getattr(tokenizer, "_tokenizer", None)
    clone = _clone_backend(backend) if backend is not None else None
    if clone is None:
        return copy.deepcopy(tokenizer)
    copied = _with_specials(tokenizer, {})
    copied.__dict__["_tokenizer"] = clone
    return copied


def _clone_backend(backend: Any) -> Any:
    """A new ``tokenizers.Tokenizer`` equal to ``backend`` (see ``copy_tokenizer``); None where that fails."""
    from tokenizers import Tokenizer

    try:
        if backend.truncation is not None or backend.padding is not None:
            return None
        clone = Tokenizer(backend.model)
        for part in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
            value = getattr(backend, part)
            if value is not None:
                setattr(clone, part, value)
        added = backend.get_added_tokens_decoder()
        run: list[Any] = []
        for tid in [*sorted(added), None]:  # consecutive tokens of one kind in one call (each call rebuilds a matcher)
            token = added.get(tid) if tid is not None else None
            if run and (token is None or token.special != run[-1].special):
                (clone.add_special_tokens if run[-1].special else clone.add_tokens)(run)
                run = []
            if token is not None:
                run.append(token)
        clone.encode_special_tokens = backend.encode_special_tokens
        same = {i: repr(t) for i, t in clone.get_added_tokens_decoder().items()} == {
            i: repr(t) for i, t in added.items()
        }
        return clone if same and clone.get_vocab_size() == backend.get_vocab_size() else None
    except Exception:  # an exotic backend: the deep copy decides
        return None


# What a copy shares with its tokenizer instead of copying: the vocabulary and merges some tokenizer classes keep
# from their construction (read-only model data, hundreds of thousands of entries, that a copy would make the
# garbage collector walk again and again), and the backend.
_SHARED_ATTRIBUTES = frozenset({"_tokenizer", "_vocab", "_merges"})


def _with_specials(tokenizer: Any, specials: dict[str, str]) -> Any:
    """``tokenizer`` with other bos/eos, sharing its backend (a shallow copy with its own special-token map)."""
    clone = copy.copy(tokenizer)
    clone.__dict__ = {
        k: copy.copy(v) if isinstance(v, dict | list) and k not in _SHARED_ATTRIBUTES else v
        for k, v in vars(tokenizer).items()
    }
    for name, text in specials.items():
        setattr(clone, name, text)
    return clone


class Synthesizer:
    """Synthesized models over a fixed set of candidates (name -> ``LoadedModel``), which it never changes.

    Each base is copied (once per distinct token set) and the template's control tokens are added to the copy. A
    scan passes ``vocabulary``, the control tokens of every template it will see: then each base is copied once
    (per worker) with all of them, and the tokens a template does not write are hidden from its audit
    (``LoadedModel.hidden_specials``), which is then the audit of its own synthesized tokenizer
    (``tests/sources/test_synthesized.py``). The candidates themselves are never given these tokens: a template
    that builds control tokens at render time (``'<|' + role + '|>'``) would otherwise get them atomic on a real
    tokenizer too.
    On the scan's shared copy such a template does get atomic the tokens it builds if another scanned template
    writes them literally (closer to its real tokenizer, but not what a synthesis from it alone gives).
    """

    def __init__(self, candidates: Mapping[str, LoadedModel], vocabulary: Iterable[str] = ()) -> None:
        self.candidates = dict(candidates)
        self.vocabulary = tuple(dict.fromkeys(vocabulary))
        self._known = frozenset(self.vocabulary)
        self._lacks: dict[str, tuple[str, ...]] = {}  # per base: the tokens of ``vocabulary`` it lacks
        self._copies: dict[tuple[str, tuple[str, ...]], tuple[Any, frozenset[str]]] = {}
        self._clones: dict[tuple[int, tuple[tuple[str, str], ...]], Any] = {}

    def tokenizer(self, base: str, own: Sequence[str]) -> tuple[Any, frozenset[str]]:
        """A copy of ``base`` holding ``own`` atomic, and every token it holds that the real base lacks."""
        from tito_audit.sources.control_tokens import token_in_vocab

        real = self.candidates[base]
        if self._known.issuperset(own):  # the scan's shared copy: what the base lacks of the whole vocabulary
            lacks = self._lacks.get(base)
            if lacks is None:
                lacks = self._lacks[base] = tuple(t for t in self.vocabulary if not token_in_vocab(real.tokenizer, t))
        else:
            lacks = tuple(t for t in dict.fromkeys(own) if not token_in_vocab(real.tokenizer, t))
        key = (base, lacks)
        if key not in self._copies:
            tok = copy_tokenizer(real.tokenizer)
            self._copies[key] = (tok, _add(tok, [*key[1], *PLACEHOLDERS.values()]))
        return self._copies[key]

    def prepare(self) -> None:
        """Each base's copy with the whole ``vocabulary``, and its added-token pattern and segment encoder
        (``TokenizerCache.prepare``: regular expressions over hundreds of tokens), built now. A scan calls this
        before its workers fork, so that they share what each would otherwise build for itself. A base that fails
        here is left to the audit that needs it, which classifies the failure."""
        from tito_audit.rendering.tokenizer_cache import tokenizer_cache

        for name in self.candidates:
            try:
                tok, _ = self.tokenizer(name, ())
                tokenizer_cache(tok).prepare()  # computed once, kept by the cache
            except Exception:  # the audit that needs this base meets the failure itself
                continue

    def _specials(self, tok: Any, template: str) -> Any:
        """``tok`` with the template's eos (``template_eos``) and a bos and eos where the base has none."""
        wanted = {n: text for n, text in PLACEHOLDERS.items() if getattr(tok, n, None) is None}
        eos = template_eos(tok, template)
        if eos is not None and eos != tok.eos_token:
            wanted["eos_token"] = eos
        if not wanted:
            return tok
        key = (id(tok), tuple(sorted(wanted.items())))
        if key not in self._clones:
            from tito_audit.rendering.tokenizer_cache import tokenizer_cache

            clone = self._clones[key] = _with_specials(tok, wanted)
            tokenizer_cache(clone).share_backend_parts(tokenizer_cache(tok))  # one pattern per base, not per eos
        return self._clones[key]

    def model(
        self, template: str, origin: str, base: BaseFit | None = None, roles: Sequence[str] | None = None
    ) -> LoadedModel:
        """``template`` on the tokenizer synthesized from its control tokens (base chosen by ``choose_base``);
        ``roles``: its role literals (read on a candidate when not given)."""
        if roles is None:
            roles = template_roles(template, self.candidates)
        if base is None:
            base = choose_base(template, self.candidates, roles)
        own = template_controls(template, roles)
        tok, synthetic = self.tokenizer(base.name, own)
        tok = self._specials(tok, template)
        real = self.candidates[base.name]
        mine = [t for t in own if t in synthetic]
        used = {tok.bos_token, tok.eos_token, *mine}
        prov = replace(
            real.provenance,
            template_file=origin,
            template_name=None,
            template_sha256=sha256_text(template),
            tokenizer_class=type(tok).__name__,
            bos_token=tok.bos_token,
            eos_token=tok.eos_token,
            vocab_size=len(tok) - len(synthetic - used),
            tokenizer=SYNTHESIZED,
            tokenizer_base=real.name,
            synthesized_tokens=tuple(mine),
        )
        return LoadedModel(f"{SYNTHESIZED}:{real.name}", tok, template, prov, (), frozenset(synthetic - used))


def is_synthesized(provenance: Provenance | None) -> bool:
    return provenance is not None and provenance.tokenizer == SYNTHESIZED


def on_its_control_tokens(model: LoadedModel, limits: Any = None) -> LoadedModel:
    """``model`` with a template that is not its tokenizer's own (``--chat-template``): unchanged where the tokenizer
    has every control literal the template writes (``control_tokens.missing_tokens``), else the template on a
    tokenizer synthesized from them with ``model``'s as the base, an approximate verdict that says so. A verdict
    on a tokenizer that splits the template's turn closers and openers judges that tokenizer's artefacts."""
    from tito_audit.rendering.analysis import literal_text
    from tito_audit.rendering.renderer import Renderer
    from tito_audit.sources.control_tokens import missing_tokens, role_literals

    template = model.chat_template
    try:
        roles = role_literals(Renderer(model.tokenizer, template, limits=limits))
        missing = missing_tokens(model.tokenizer, literal_text(template), model.hidden_specials, roles)
    except Exception:  # a template that cannot be read or prepared: the audit reports it as it is
        return model
    if not missing:
        return model
    synthesized = Synthesizer({model.name: model}).model(template, model.provenance.template_file, None, roles)
    return replace(synthesized, name=model.name)
