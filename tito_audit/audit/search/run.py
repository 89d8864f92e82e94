"""The counterexample search: hypothesis draws conversations, plays them, and shrinks the first that breaks.

``hypothesis.find`` with a fixed seed (``random=Random(seed)``), no example database and no deadline, and without
the constants hypothesis otherwise draws from the modules the process has loaded (``compat.reproducible_search``:
importing ``tito_audit.cli``, or running under pytest, changed the draws), so that the same template, options,
seed and hypothesis release give the same counterexample on every run, machine and entry point. The budget is the number
of conversations drawn before giving up (``max_examples``); shrinking a counterexample is bounded too
(``SHRINK_PLAYS`` plays): a conversation played once is never played again (a memo by content), and past the
bound every unplayed candidate counts as holding, which ends the shrink at the smallest counterexample so far. A
shrink keeps the kind of break found: a conversation that breaks buffer + delta is not shrunk into one that only
breaks the re-render (whose finding is the weaker one).
Where a safe template's first counterexample only breaks the re-render, the search goes on for one that breaks
buffer + delta (the stronger finding) with the budget left, replaying what it drew from the memo.
Before the draws come the sweeps (``sweep``: the budget's first conversations) and the screen of pairs within one
message (``pairs``: its candidates are played on top of the budget).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from random import Random
from typing import TYPE_CHECKING, Any

from tito_audit.audit.search import DEFAULT_BUDGET, steers
from tito_audit.audit.search.accepted import accepted, held, refusal, renders_whole
from tito_audit.audit.search.conversations import conversations
from tito_audit.audit.search.pairs import MAX_CANDIDATES, UNSCREENED, screened
from tito_audit.audit.search.property import KINDS, UNSAFE_KINDS, judged, play
from tito_audit.audit.search.result import SearchResult
from tito_audit.audit.search.shrink import shrunk
from tito_audit.audit.search.space import SearchSpace
from tito_audit.audit.search.sweep import SWEEP_NAMES, like_sweep, sweeps
from tito_audit.compat import available, reproducible_search
from tito_audit.errors import InternalError, RenderError
from tito_audit.scenarios.searched import Conversation

if TYPE_CHECKING:
    from tito_audit.audit.context import AuditContext
    from tito_audit.audit.coverage import Coverage

SHRINK_PLAYS = 100  # plays a shrink may take at most, per counterexample (three per conversation of the budget)
# The share of the characters the template has left to render (``rendering.budget``) the search may spend: the
# audit's own renders, and the checks that run again on a counterexample, keep the rest.
BUDGET_SHARE = 0.5
SEARCH_CPU_SHARE = 1.0  # the search's render CPU, on top of the template's budget, as a share of that budget


class _Spent(BaseException):
    """The search has spent its share of the template's budget (a ``BaseException``: hypothesis lets it through
    instead of shrinking it as a failure of the property)."""


class _Failed(BaseException):
    """Our code or a library's failed on a drawn conversation (an ``InternalError``, carried past hypothesis as
    ``_Spent`` is)."""

    def __init__(self, error: InternalError) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass
class _State:
    memo: dict[str, str | None] = field(default_factory=dict)
    plays: int = 0
    drawn: int = 0
    rendered: int = 0
    cap: int = 0
    hit: bool = False  # the current find has met a counterexample (what follows is shrinking)
    hit_kind: str = ""  # how it broke: the shrink keeps that kind (or a stronger one)
    unjudged: set[str] = field(default_factory=set)  # conversations the template rendered that could not be judged
    sweeps: list[str] = field(default_factory=list)  # the sweeps' keys, in order (a refused one's accepted part's)
    errors: dict[str, RenderError] = field(default_factory=dict)  # why the template refused a conversation, by key
    refused: dict[str, dict[str, int]] = field(default_factory=dict)  # per sweep refused: its blocks reshaped, dropped
    dropped: dict[str, set[str]] = field(default_factory=dict)  # what those blocks held (``accepted.held``)
    played: set[str] = field(default_factory=set)  # what the sweeps the template rendered held
    pairs: dict[str, int] = field(default_factory=dict)  # the screen of pairs: pairs screened, candidates played
    stopped: str | None = None
    shrink_stopped: str | None = None  # the search's budget ran out while shrinking (the counterexample may be larger)


def search(
    ctx: AuditContext, budget: int, seed: int, wanted: Sequence[str], coverage: Coverage | None = None
) -> SearchResult:
    """Counterexamples of the kinds ``wanted`` for ``ctx``'s template (see the module docstring); ``coverage``:
    the template's arms. A search of ``STEER_BUDGET`` conversations or more plays each through the template's
    instrumented copy and scores it by the arms it takes that none before it took (``hypothesis.target``), which
    steers the draws towards arms not yet taken; a smaller one (a scan's) leaves its renders out of the coverage."""
    result = SearchResult(budget, seed, tuple(k for k in KINDS if k in wanted))
    space = SearchSpace.of(ctx)
    shrink = min(SHRINK_PLAYS, 3 * budget)
    state = _State(cap=budget + shrink)
    steering = coverage if steers(budget) else None
    allowance = _Allowance(ctx, budget)
    if steering is not None:  # each render's arms recorded as it renders, not played through the copy again
        ctx.renderer.render_through(steering.play)
    try:
        _look(ctx, space, budget, seed, result, state, allowance, steering, shrink)
    finally:
        ctx.renderer.render_through(None)
        allowance.close()
    _name_fallback(ctx)
    result.drawn, result.rendered, result.plays = state.drawn, state.rendered, state.plays
    result.stopped, result.shrink_stopped = state.stopped, state.shrink_stopped
    result.unjudged = tuple(n for n, key in zip(SWEEP_NAMES, state.sweeps, strict=False) if key in state.unjudged)
    result.refused = dict(state.refused)
    result.pairs = dict(state.pairs)
    result.unplayed = tuple(name for name, values in state.dropped.items() if values - state.played)
    if coverage is not None and steering is None:
        coverage.skip()  # a small search's renders are not counted (the counterexamples' are, by the checks)
    return result


def _name_fallback(ctx: AuditContext) -> None:
    """Where the draws ran on ``search_constants``' fallback, the model's provenance names it with the other
    fallbacks (probed when it was loaded, before this process had imported hypothesis)."""
    if available("search_constants"):
        return
    fallbacks = ctx.model.provenance.libraries.setdefault("compat_fallbacks", [])
    if "search_constants" not in fallbacks:
        fallbacks.append("search_constants")


def _look(
    ctx: AuditContext,
    space: SearchSpace,
    budget: int,
    seed: int,
    result: SearchResult,
    state: _State,
    allowance: _Allowance,
    steering: Coverage | None,
    shrink: int,
) -> None:
    """The finds: the sweeps first (``sweep``), then the screen of pairs (``pairs``), then the draws: one for every
    kind wanted, then, where a re-render break came first, one for the kinds that make the verdict ``unsafe``
    (buffer + delta broken, a value lost)."""
    looking = list(result.wanted)
    plans = sweeps(space)[:budget]  # the sweeps are the budget's first conversations
    state.sweeps = [c.key for c in plans]
    start, screened_for = 0, set()  # the kinds the screen of pairs looked for so far

    def from_sweeps(kinds: tuple[str, ...]) -> Conversation | None:
        nonlocal start
        found, start = _swept(ctx, plans, start, state, allowance, steering, kinds)
        return found

    def from_pairs(kinds: tuple[str, ...]) -> Conversation | None:
        # once per kinds: after a re-render break, screened again for the stronger one (its own comparison)
        if kinds in screened_for:
            return None
        screened_for.add(kinds)
        return _paired(ctx, space, state, allowance, steering, kinds)

    def from_draws(kinds: tuple[str, ...]) -> Conversation | None:
        draws = budget - len(plans)
        return _find(ctx, space, draws, seed, kinds, state, allowance, steering) if draws > 0 else None

    # a sweep's break is judged as the sweeps are (cut after every block); after a re-render break, the sweeps left
    # and then the screen of pairs and the draws look on for the stronger one
    for finder, every_cut in ((from_sweeps, True), (from_pairs, True), (from_draws, False)):
        while looking:
            try:
                found = finder(tuple(looking))
            except _Spent:
                state.stopped = allowance.why
                return
            except _Failed as failed:
                raise failed.error from None
            if found is None:
                break
            played = play(ctx, found, f"search/{len(result.found) + 1}", every_cut=every_cut)
            result.found.append(played)
            looking = [k for k in looking if k in UNSAFE_KINDS]  # after a re-render break, only an unsafe one
            if played.kind in UNSAFE_KINDS or not looking:
                return
            state.cap += shrink


class _Allowance:
    """The search's own budget, on top of the template's: as much render CPU again as the template's whole budget
    (``SEARCH_CPU_SHARE``), and a share of the characters it had left (``BUDGET_SHARE``). The search's render CPU is
    not charged to what the audit had left (``close`` gives the template its CPU back as it was; the characters its
    renders produce, and renders past a limit, still count), so that the checks run again on a counterexample keep
    it, and the CPU bound is a bound for hostile templates only: no
    bundled or shared model's search comes near it (0.07-0.2 s of 3 s; a Python encoder's 0.5 s), so a loaded
    machine (a test run's collector, a shared CI runner) does not change how many conversations are drawn, as the
    half of what was left did (``search:39/40`` under CI's load). The characters are the same on every machine.

    A search of more conversations than the default (``--search N``, N past ``DEFAULT_BUDGET``) gets both in
    proportion: a larger budget draws more, never fewer (a fixed share stopped a search of 100 after 43 draws on
    the tests' plain template, and one of 200 after 38 on Qwen2.5's, where one of 40 drew its 40). The characters
    past the default share are lent (``lend``), so that the checks after keep what they keep after a default
    search."""

    def __init__(self, ctx: AuditContext, conversations: int = DEFAULT_BUDGET) -> None:
        self.budget = budget = ctx.renderer.budget
        self.start = (budget.spent, budget.produced)
        self.cap = budget.cpu_seconds
        scale = max(1.0, conversations / DEFAULT_BUDGET)
        self.cpu = self.cap * SEARCH_CPU_SHARE * scale
        chars = budget.output_chars
        self.charged = (chars - self.start[1]) * BUDGET_SHARE if chars else 0.0  # what the template is charged
        self.chars = self.charged * scale
        self.loan = budget.lend(self.cpu, int(self.chars - self.charged))
        self.why = ""

    def spent(self) -> bool:
        used_cpu = self.budget.spent - self.start[0]
        used_chars = self.budget.produced - self.start[1]
        # characters first: they are the same on every machine, CPU seconds are not (where both ran out together,
        # the report says the same on every run)
        if self.chars and used_chars > self.chars:
            self.why = f"its share of the characters the template may render ({self.chars:,.0f})"
        elif self.cpu and used_cpu > self.cpu:
            self.why = f"its render CPU ({self.cpu:.2f}s, on top of the template's {self.cap:g}s)"
        return bool(self.why)

    def close(self) -> None:
        """The template's CPU budget as it was, its spending less the search's renders (a stop their CPU caused,
        past the search's allowance, lifted: the checks keep what they had left)."""
        self.budget.repay(self.loan, self.charged)


def _swept(
    ctx: AuditContext,
    plans: list[Conversation],
    start: int,
    state: _State,
    allowance: _Allowance,
    coverage: Coverage | None,
    wanted: tuple[str, ...],
) -> tuple[Conversation | None, int]:
    """The first of the sweep conversations ``plans[start:]`` that breaks the property in a way ``wanted`` (see
    ``sweep``), shrunk, and the index of the sweep after it; None (and the end) otherwise. Played as a draw is:
    memoized, within the caps, its arms counted (not scored: no draw follows). A sweep the template refuses is
    played again as the part of it the template accepts (``accepted``), which is not another draw; what the blocks it
    refused held is kept, to name the sweep where no conversation played holds it (``SearchResult.unplayed``)."""
    probe = _Probe(ctx, state, allowance, coverage, wanted, lambda *args, **kwargs: None, every_cut=True)
    state.hit = False
    renders = renders_whole(ctx)

    def within_allowance(conversation: Conversation) -> bool:
        if allowance.spent():
            raise _Spent
        return renders(conversation)

    for i in range(start, len(plans)):
        conversation, name = plans[i], SWEEP_NAMES[i]
        if probe.breaks(conversation):
            return shrunk(conversation, probe.breaks), i + 1
        if conversation.key not in state.errors:  # rendered (or judged already): what it holds was played
            state.played |= held(conversation.messages)
            continue
        if not refusal(state.errors[conversation.key]) or name in state.refused:
            continue
        try:
            part, refused, reshaped = accepted(conversation, partial(like_sweep, like=conversation), within_allowance)
        except _Spent:
            state.dropped[name] = held(conversation.messages)  # its values were tried nowhere: said
            raise
        state.refused[name] = {"reshaped": reshaped, "dropped": len(refused)}
        if part is not None:
            state.sweeps[i] = part.key
            if probe.breaks(part, draw=False):
                return shrunk(part, probe.breaks), i + 1
        # no part, or the part alone refused (a loop prefix the trial render does not make): nothing of it was tried
        if part is None or part.key in state.errors:
            state.dropped[name] = held(conversation.messages)
        else:
            state.dropped[name] = held(m for block in refused for m in block)
            state.played |= held(part.messages)
    return None, len(plans)


def _paired(
    ctx: AuditContext,
    space: SearchSpace,
    state: _State,
    allowance: _Allowance,
    coverage: Coverage | None,
    wanted: tuple[str, ...],
) -> Conversation | None:
    """The first candidate of the screen of pairs (``pairs.screened``) that breaks the property in a way ``wanted``,
    shrunk; None otherwise. Played as a sweep is, but not counted as a draw (the screen chose it); where no pair
    could be screened, the search names it (``pairs.UNSCREENED``)."""
    probe = _Probe(ctx, state, allowance, coverage, wanted, lambda *args, **kwargs: None, every_cut=True)
    state.hit = False

    def check() -> None:
        if allowance.spent():
            raise _Spent
        state.pairs["screened"] += 1

    candidates = screened(ctx, space, check, wanted, coverage)
    if candidates is None:
        state.dropped[UNSCREENED] = {UNSCREENED}  # held by no conversation played: named
        return None
    state.pairs.setdefault("screened", 0)  # counted over the screens (a second one looks for buffer + delta only)
    state.pairs.setdefault("candidates", 0)
    for candidate in candidates:
        if state.pairs["candidates"] == MAX_CANDIDATES:  # the pairs left unscreened: named
            state.pairs["stopped"] = 1
            return None
        state.pairs["candidates"] += 1
        state.cap += 1  # a candidate is played on top of the budget's conversations, never in their place
        if probe.breaks(candidate, draw=False):
            return shrunk(candidate, probe.breaks)
    return None


def _find(
    ctx: AuditContext,
    space: SearchSpace,
    budget: int,
    seed: int,
    wanted: tuple[str, ...],
    state: _State,
    allowance: _Allowance,
    coverage: Coverage | None,
) -> Conversation | None:
    import warnings

    from hypothesis import HealthCheck, Phase, Verbosity, find, settings, target
    from hypothesis.errors import HypothesisWarning, NoSuchExample

    state.hit = False
    # Everything the condition reads sits in a box emptied once the search is over: hypothesis' engine leaves
    # cycles behind, and an audit's context must not be in them (it would wait for the garbage collector).
    box: list[_Probe] = [_Probe(ctx, state, allowance, coverage, wanted, target)]

    def breaks(drawn: Any) -> bool:
        return box[0].breaks(Conversation(*drawn))

    config = settings(
        max_examples=max(1, budget),
        database=None,
        deadline=None,
        derandomize=False,
        phases=(Phase.generate, Phase.target, Phase.shrink),
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
        report_multiple_bugs=False,
        print_blob=False,
    )
    strategy, release = conversations(space)
    try:
        with warnings.catch_warnings(), reproducible_search():
            warnings.simplefilter("ignore", HypothesisWarning)  # the repr of a long counterexample
            return Conversation(*find(strategy, breaks, settings=config, random=Random(seed)))
    except NoSuchExample:
        return None
    finally:
        box.clear()
        release()


@dataclass
class _Probe:
    """What the search's condition reads."""

    ctx: AuditContext
    state: _State
    allowance: _Allowance
    coverage: Coverage | None
    wanted: tuple[str, ...]
    target: Any
    every_cut: bool = False  # each conversation judged cut after each appended block (the sweeps': ``kind_of``)

    def breaks(self, conversation: Conversation, draw: bool = True) -> bool:
        """Whether ``conversation`` breaks the property in a way ``wanted`` (memoized; see the module docstring).
        ``draw``: it counts as one of the conversations drawn (a refused sweep's accepted part does not)."""
        state, coverage = self.state, self.coverage
        key = conversation.key
        draw = draw and not state.hit
        if draw:
            state.drawn += 1
        if key not in state.memo:
            if state.plays >= state.cap or self.allowance.spent():
                if not state.hit and self.allowance.why:
                    state.drawn -= draw
                    raise _Spent
                if self.allowance.why:  # a loaded machine may stop a slow template's shrink elsewhere: said
                    state.shrink_stopped = self.allowance.why
                return False  # past the bound: the shrink stops at the smallest counterexample so far
            before = coverage.arms_run() if coverage is not None else 0
            ran = coverage.checkpoint() if coverage is not None and not state.hit else None
            try:
                played = play(self.ctx, conversation, "search/candidate", self.every_cut)
            except InternalError as exc:
                raise _Failed(exc) from None
            if coverage is not None and not state.hit:
                if judged(played):
                    coverage.trace()  # the arms this conversation's renders take
                    self.target(float(coverage.arms_run() - before), label="template arms first run")
                else:  # refused, or not judged (no canonical sample): the arms it took prove nothing
                    coverage.skip(ran)
            state.plays += 1
            state.rendered += played.simulation.ok and draw
            if played.simulation.ok and not judged(played):
                state.unjudged.add(key)
            if played.simulation.error is not None:
                state.errors[key] = played.simulation.error
            state.memo[key] = played.kind
        kind = state.memo[key]
        if kind not in self.wanted:
            return False
        if not state.hit:
            state.hit, state.hit_kind = True, kind
            return True
        # shrinking: a smaller conversation that breaks only in a weaker way (the re-render, where the one found
        # broke buffer + delta) is not the same counterexample, and would report the weaker finding
        return KINDS.index(kind) <= KINDS.index(state.hit_kind)
