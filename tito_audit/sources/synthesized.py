"""A tokenizer synthesized from a template's own control tokens, for a template that no tokenizer at hand matches.

What decides most TITO properties is the template's structure and whether its control tokens are atomic, not
the exact merges of the BPE. So a template whose vocabulary is not at hand is audited on a real base tokenizer
to which the control-token text it writes (``<|eot_id|>``, ``[INST]``...) is added as atomic special tokens;
``bos_token``/``eos_token`` are the base's (a placeholder special token where the base has none). Stop tokens
are then derived exactly as for a real tokenizer (``rollout.stop``): the special token the template writes after
an assistant turn, plus eos.

The base is derived from the template, never from a model name (``choose_base``): the candidate that already
has most of the template's control tokens as single tokens, then defines the special-token variables the template
reads, then gives back the template's literal text exactly after encode and decode, then encodes that text in the
fewest tokens; ties go to the order the candidates were given.

Every such verdict is approximate: ``provenance.tokenizer`` is ``"synthesized"`` and names the base, and the
checks in ``MERGE_DEPENDENT`` (measured: ``benchmarks/bench_synthesized.py``) are ``not_applicable``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tito_audit.sources.load import LoadedModel, Provenance, sha256_text

if TYPE_CHECKING:
    from tito_audit.checks.base import CheckResult, CheckSpec
    from tito_audit.context import AuditContext

SYNTHESIZED = "synthesized"
# Special-token variables transformers passes to a template (those the tokenizer defines).
SPECIAL_VARIABLES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# Checks whose status on a synthesized tokenizer does not follow the real one's, because they read what only the
# real tokenizer knows: reported not_applicable (not run) on it. Decided by measurement, benchmarks/results/
# synthesized-agreement.json (every shared and bundled model, real tokenizer hidden; docs/checks.md explains).
MERGE_DEPENDENT: dict[str, str] = {
    "roundtrip": "its rates and findings are the base tokenizer's merges (status agreed only because every real "
    "tokenizer has non-canonical splits; the rates differed)",
    "double_bos": "whether encoding adds a BOS is the real tokenizer's post-processor, which no template shows "
    "(agreed on 8 of 16 models)",
    "stop_boundary": "the seam's atomicity depends on how the real merges split multi-byte and prefix-space text, "
    "and its eos finding on shipped metadata (agreed on 11 of 16 models)",
}
# Checks whose status agreed on every model but whose findings' cause classes (whitespace, serialization,
# special_token...) are read from token boundaries that the base's merges draw: run, flagged approximate.
CLASSES_APPROXIMATE = ("naive_rerender", "append_matrix", "history_rewrite")


def template_controls(template: str) -> list[str]:
    """The control-token text a template writes (literal text and string constants), in order of appearance."""
    from tito_audit.scan.hazards import literal_text
    from tito_audit.scan.pick import control_literals

    return control_literals(literal_text(template))


def read_special_variables(template: str) -> list[str]:
    """The special-token variables (``bos_token``...) a template reads."""
    from tito_audit.rendering.renderer import loaded_names

    try:
        names = loaded_names(template)
    except Exception:  # does not parse: the audit reports that
        return []
    return [v for v in SPECIAL_VARIABLES if v in names]


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


def fit(name: str, tokenizer: Any, template: str, order: int = 0) -> BaseFit:
    from tito_audit.scan.hazards import literal_text
    from tito_audit.scan.pick import token_in_vocab

    controls = template_controls(template)
    text = literal_text(template)
    for t in controls:
        text = text.replace(t, "\n")
    ids = tokenizer.encode(text, add_special_tokens=False)
    back = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    return BaseFit(
        name=name,
        atomic=sum(1 for t in controls if token_in_vocab(tokenizer, t)),
        provides=sum(1 for v in read_special_variables(template) if getattr(tokenizer, v, None) is not None),
        lossless=back == text,
        tokens=len(ids),
        order=order,
    )


def choose_base(template: str, candidates: Mapping[str, Any]) -> BaseFit:
    """The candidate (name -> tokenizer) that fits ``template`` best (see the module's docstring)."""
    if not candidates:
        raise ValueError("no candidate tokenizers to synthesize from")
    fits = [fit(name, tok, template, i) for i, (name, tok) in enumerate(candidates.items())]
    return max(fits, key=lambda f: f.key)


def _added(tokenizer: Any, tokens: Iterable[str]) -> list[str]:
    from tito_audit.scan.pick import token_in_vocab

    return [t for t in dict.fromkeys(tokens) if not token_in_vocab(tokenizer, t)]


def _synthesize_tokenizer(base: Any, tokens: Sequence[str]) -> Any:
    """A copy of ``base`` with ``tokens`` as atomic special tokens and a bos and eos (placeholders if it has none)."""
    from tokenizers import AddedToken

    tok = copy.deepcopy(base)
    tok.add_tokens([AddedToken(t, special=True, normalized=False) for t in tokens], special_tokens=True)
    for name in ("bos_token", "eos_token"):
        if getattr(tok, name, None) is None:
            tok.add_special_tokens({name: AddedToken(f"<|{name}|>", special=True, normalized=False)})
    return tok


def template_eos(tokenizer: Any, template: str) -> str | None:
    """The eos of the synthesized model: the base's eos where the template writes ``eos_token`` (it shows where eos
    goes, not its text), else the special token the template ends an assistant turn with (what a model whose
    template never writes eos has as eos: ``<|im_end|>``, ``<|eot_id|>``); None: keep the base's."""
    from tito_audit.rendering.renderer import Renderer
    from tito_audit.rollout.stop import template_turn_end_tokens

    if "eos_token" in read_special_variables(template):
        return None
    try:
        ends = template_turn_end_tokens(Renderer(tokenizer, template))
    except Exception:  # a template that cannot render: the audit says so
        return None
    return ends[0] if ends else None


def _with_eos(tokenizer: Any, eos: str) -> Any:
    """``tokenizer`` with another eos, sharing its backend (a shallow copy: its own special-token map)."""
    clone = copy.copy(tokenizer)
    clone.__dict__ = {
        k: copy.copy(v) if isinstance(v, dict | list) and k != "_tokenizer" else v for k, v in vars(tokenizer).items()
    }
    clone.eos_token = eos
    return clone


class Synthesizer:
    """Synthesized models over a fixed set of candidates (name -> ``LoadedModel``).

    ``vocabulary``: control tokens of every template this synthesizer will see (a scan's corpus). Given, each
    base is copied once and all of them are added to it, so that a scan pays one copy per base rather than one
    per template; the tokens a template does not write are hidden from its audit (``LoadedModel.hidden_specials``),
    which is then the audit of the template's own synthesized tokenizer (``tests/test_synthesized.py``).
    """

    def __init__(self, candidates: Mapping[str, LoadedModel], vocabulary: Iterable[str] = ()) -> None:
        self.candidates = dict(candidates)
        self.vocabulary = tuple(dict.fromkeys(vocabulary))
        self._tokenizers: dict[tuple[str, tuple[str, ...]], Any] = {}

    def tokenizer(self, base: str, own: Sequence[str]) -> tuple[Any, list[str]]:
        """The synthesized tokenizer on ``base`` holding ``own`` atomic, and the tokens added to the base."""
        real = self.candidates[base].tokenizer
        wanted = _added(real, [*self.vocabulary, *own]) if set(own) <= set(self.vocabulary) else _added(real, own)
        key = (base, tuple(wanted))
        if key not in self._tokenizers:
            self._tokenizers[key] = _synthesize_tokenizer(real, wanted)
        return self._tokenizers[key], wanted

    def model(self, template: str, origin: str, base: BaseFit | None = None) -> LoadedModel:
        """``template`` on the tokenizer synthesized from its control tokens (base chosen by ``choose_base``)."""
        if base is None:
            base = choose_base(template, {n: m.tokenizer for n, m in self.candidates.items()})
        own = template_controls(template)
        tok, added = self.tokenizer(base.name, own)
        eos = template_eos(tok, template)
        if eos is not None and eos != tok.eos_token:
            tok = _with_eos(tok, eos)
        real = self.candidates[base.name]
        mine = [t for t in added if t in own]
        prov = replace(
            real.provenance,
            template_file=origin,
            template_name=None,
            template_sha256=sha256_text(template),
            tokenizer_class=type(tok).__name__,
            bos_token=tok.bos_token,
            eos_token=tok.eos_token,
            vocab_size=len(tok),
            tokenizer=SYNTHESIZED,
            tokenizer_base=real.name,
            synthesized_tokens=tuple(mine),
        )
        return LoadedModel(
            f"{SYNTHESIZED}:{real.name}",
            tok,
            template,
            prov,
            (),
            hidden_specials=frozenset(added) - set(mine),
        )


def is_synthesized(provenance: Provenance | None) -> bool:
    return provenance is not None and provenance.tokenizer == SYNTHESIZED


def run_on(spec: CheckSpec, ctx: AuditContext) -> CheckResult:
    """``run_check``, except on a synthesized tokenizer: a merge-dependent check is ``not_applicable`` (not run,
    with the reason), and one whose finding classes are approximate says so in its ``data``."""
    from tito_audit.checks.base import CheckResult, run_check

    prov = ctx.model.provenance
    if not is_synthesized(prov):
        return run_check(spec, ctx)
    why = MERGE_DEPENDENT.get(spec.id)
    if why is not None:
        summary = f"not judged on a synthesized tokenizer (base {prov.tokenizer_base}): {why}"
        return CheckResult(
            spec.id, spec.title, "not_applicable", spec.severity, summary, spec.explanation, spec.fix_hint
        )
    result = run_check(spec, ctx)
    result.data["approximate"] = (
        "synthesized tokenizer: the finding classes are read from the base's token boundaries"
        if spec.id in CLASSES_APPROXIMATE
        else "synthesized tokenizer: status measured to agree with the real tokenizer's"
    )
    return result
