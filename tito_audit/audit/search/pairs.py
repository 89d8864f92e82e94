"""Pairs of values within one message: every name shape with every text core in one tool cycle, screened by text.

The sweeps and the draws put values into a conversation one at a time: each name shape meets a few text cores in a
result, never all of them. A template may rewrite an earlier message only where two of its values say something
together: a result whose tool name is dotted and whose content is digits alone (``tests/data/search/pairs/``). Met
as conversations, every name shape with every text core is some five hundred tool cycles, and each breaks only where
its pair is the one result of its append: thousands of renders of long episodes.

So each pair is screened first, by trial renders of one short episode (``episode``): a user turn, a call of that
name given that core, its result holding it, an answer, a user turn and another answer; every name shape with every
core in the plainest forms of the cycle's other fields, then each other form of each (a call id's shape, a result
without its name, a call without arguments or given every key, the key holding the core) with every core and every
name, and a result's three fields together: each id without the name, with every core (``pairs``). Each
comparison (``comparisons``) is of two renders of it, a shorter cut that a longer one must begin with: the call turn
last (the model's turn, as the loop renders it to read the sample) against the prompt after the result's append
(buffer + delta), and the call turn last or the result last against the whole episode (the re-render). Only the
comparisons of the kinds the search looks for are made (after a re-render break, the search screens again for
buffer + delta alone), and only those the plainest pair's episode (``NAME_SHAPES[0]``, ``TEXTS[0]``) keeps: a pair
that fails one of them is a candidate, a call or a result the template renders otherwise once more follows. A
candidate is played as any conversation of the search is (judged by tokens, shrunk, shown at its first divergent
token): the screen only chooses what is played, at most ``MAX_CANDIDATES`` of them (past them, the search names
it: ``search:pairs:stopped``). A pair the template refuses is one a loop cannot send it, and is skipped; where the
template refuses the plainest pair's episode, or keeps none of its comparisons, no pair can be screened, and the
search names it (``search:refused:pairs``).

Its renders are trials (``Renderer.render_trial``): not cached, each cut rendered once per pair, their CPU charged
to the search's allowance (``check``) but not their characters: the screen's size is fixed, and the characters left
are the draws'. Where the search is steered by template coverage (its default budget), they render through the
template's instrumented copy and count: each was compared as a played conversation's would be, by the text the
history rewrite would change (a lookup of a pair, ``{True: A, False: B}[TEST]``, taken only in the screen is no
longer named as never taken).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING, Any

from tito_audit.audit.search.accepted import trial_text
from tito_audit.audit.search.conversations import SHORT, SWEEP, declarations, sweep_turn, tool_call
from tito_audit.audit.search.property import APPEND, RERENDER
from tito_audit.audit.search.space import LONG, NAME_SHAPES, TEXTS, SearchSpace
from tito_audit.scenarios.searched import Conversation, Message

if TYPE_CHECKING:
    from tito_audit.audit.context import AuditContext

UNSCREENED = "pairs"  # the name ``SearchResult.unplayed`` gives a screen that could not run
_CALL, _RESULT = 1, 2  # where an episode (``episode``) has its call turn and its result


# The other fields of a tool cycle, each in its forms (the first: the plainest, the one every name shape meets every
# text core in): how the call and its result are tied (an id as counters, Anthropic and Kimi write it, one that starts
# again in every turn, or none), whether the result names its tool (or answers by its id alone, as OpenAI's format
# does), the call's arguments (the core and a value of the sweep of values, none, the core alone, the core under every
# key at once: a tool of many parameters, a file tool's path and content) and the key that holds the core.
IDS: tuple[str | None, ...] = ("call00001", None, "toolu_01A09q90qw90lq917835lq9", "functions.{name}:0", "call_0")
NAMED: tuple[bool, ...] = (True, False)
ARGUMENTS: tuple[str, ...] = ("core and value", "none", "core", "every key")
KEYS: tuple[str, ...] = ("query", "url", "path", "content", "city", "maxResults", "address_line1")
# values tools are given whole that no text core is (a fetch tool's URL, a file tool's path, a mail tool's address)
VALUES: tuple[str, ...] = ("https://example.com/weather?city=Paris", "/home/user/notes.txt", "ana@example.com")


@dataclass(frozen=True)
class Pair:
    """One pair of the screen: a name shape, a text core, and the forms of the cycle's other fields (indices into
    ``IDS``, ``NAMED``, ``ARGUMENTS`` and ``KEYS``), with ``k`` the pair's place (the value of the sweep of values
    it carries)."""

    name: str
    text: str
    forms: tuple[int, int, int, int] = (0, 0, 0, 0)
    k: int = 0


def episode(space: SearchSpace, pair: Pair) -> Conversation:
    """The short episode of one pair: a call of its name given its text (as ``pair.forms`` say), its result holding
    the text, then an answer, a user turn and another answer."""
    ids, named, arguments, key = pair.forms
    given = {
        "core and value": {KEYS[key]: pair.text, "value": SWEEP[pair.k % len(SWEEP)]},
        "none": {},
        "every key": dict.fromkeys(KEYS, pair.text),  # a tool of many parameters: a file tool's path and content
    }
    call = tool_call(pair.name, given.get(ARGUMENTS[arguments], {KEYS[key]: pair.text}))
    ident = IDS[ids]
    result: Message = {"role": "tool", "name": pair.name, "content": pair.text}
    if ident is not None:
        call = {"id": ident.format(name=pair.name), **call}
        result = {"role": "tool", "tool_call_id": call["id"], **result}
        if not NAMED[named]:  # answered by its id alone (never without both: it would answer nothing)
            del result["name"]
    messages: list[Message] = [
        {"role": "user", "content": "What's the weather in Paris?"},
        sweep_turn(space, None, call),
        result,
        sweep_turn(space, "It is sunny in Paris."),
        {"role": "user", "content": "Thanks. And tomorrow?"},
        sweep_turn(space, "Rain tomorrow.", k=1),
    ]
    return Conversation(tuple(messages), declarations(messages), ())


def pairs(space: SearchSpace) -> list[Pair]:
    """Every name shape with every text core (cut to ``SHORT`` characters, the long ones left out: the lengths a
    template tests are the sweep of texts'; and ``VALUES``) in the plainest forms, name by name; then each other
    form of each field with every core, the names turning with them (so with every name too), the rest plainest;
    then each id on a result without its name, with every core (a result's every field at once); then each other
    form of a field with each other form of another. Apart, not packed into the first rows: a form
    packed with another pair's (no name on the result) would hide what that pair holds (a dotted name)."""
    cores = (t[:SHORT] for t in space.texts if len(t) < LONG)  # a long text cut short is prose the cores hold
    texts = list(dict.fromkeys([*cores, *VALUES]))
    names = NAME_SHAPES
    rows = [(name, text, (0, 0, 0, 0)) for name in names for text in texts]
    fields = (len(IDS), len(NAMED), len(ARGUMENTS), len(KEYS))
    for field, count in enumerate(fields):
        for form in range(1, count):
            shape = _forms({field: form})
            # the names turn with the cores: each name meets the form too (the cores outnumber the names)
            rows += [(names[(j + form) % len(names)], text, shape) for j, text in enumerate(texts)]
    # a result's own fields are three (its id, its name, its content): every id with the name left out, with every
    # core too, so that a rewrite keyed on all three at once (an Anthropic id, no name, a JSON object: a conversation
    # converted from Claude's format) is met
    for ids in range(1, len(IDS)):
        if IDS[ids] is not None:
            shape = _forms({0: ids, 1: 1})
            rows += [(names[(j + ids) % len(names)], text, shape) for j, text in enumerate(texts)]
    # then every other form of one field with every other form of another (an Anthropic id on a result without its
    # name, as a conversation converted from Claude's format sends it), names and cores turning
    crossed = [
        _forms({f: a, g: b})
        for f, g in combinations(range(4), 2)
        for a in range(1, fields[f])
        for b in range(1, fields[g])
    ]
    rows += [(names[r % len(names)], texts[r % len(texts)], shape) for r, shape in enumerate(crossed)]
    unique = dict.fromkeys(rows)
    return [Pair(name, text, forms, k) for k, (name, text, forms) in enumerate(unique)]


def _forms(chosen: dict[int, int]) -> tuple[int, int, int, int]:
    """The forms of the four fields: those ``chosen`` (field: form), the plainest for the rest."""
    return (chosen.get(0, 0), chosen.get(1, 0), chosen.get(2, 0), chosen.get(3, 0))


# A render of an episode cut after its first N messages, with the generation prompt or not; the whole episode is
# ``WHOLE`` (its every message, without the prompt)
Cut = tuple[int, bool]
WHOLE: Cut = (0, False)
_SAMPLED: Cut = (_CALL + 1, False)  # the call turn last: the model's turn as the loop renders it to read the sample
# the screen's comparisons: each the render of a shorter cut and one of a longer that must begin with it
APPEND_COMPARISONS: tuple[tuple[Cut, Cut], ...] = ((_SAMPLED, (_RESULT + 1, True)),)  # the result's append
RERENDER_COMPARISONS: tuple[tuple[Cut, Cut], ...] = (
    (_SAMPLED, WHOLE),
    ((_RESULT + 1, False), WHOLE),
    ((_RESULT + 1, True), WHOLE),  # where the template renders no result last without the prompt
)
MAX_CANDIDATES = 24  # candidates played at most (a template that renders many pairs otherwise in a way not looked for)


def _fewest(compared: list[tuple[Cut, Cut]]) -> list[tuple[Cut, Cut]]:
    """``compared`` without the comparisons the others imply, so that each pair costs the fewest renders: one render
    of the result last against the whole (the one with the prompt, which the append's comparison renders anyway,
    where the plainest pair keeps it), and none of the call last against the whole where it begins the prompt after
    its result and that prompt begins the whole (a prefix of a prefix is one)."""
    append, result_whole = (_SAMPLED, (_RESULT + 1, True)), ((_RESULT + 1, True), WHOLE)
    if result_whole in compared:
        compared = [c for c in compared if c != ((_RESULT + 1, False), WHOLE)]
    if append in compared and result_whole in compared:
        compared = [c for c in compared if c != (_SAMPLED, WHOLE)]
    return compared


def comparisons(wanted: Sequence[str]) -> tuple[tuple[Cut, Cut], ...]:
    """The comparisons that can show a break of a kind ``wanted``: the sampled call re-rendered when its result is
    appended (buffer + delta), and the call or the result re-rendered in the whole episode (the re-render)."""
    return (APPEND_COMPARISONS if APPEND in wanted else ()) + (RERENDER_COMPARISONS if RERENDER in wanted else ())


def screened(
    ctx: AuditContext, space: SearchSpace, check: Callable[[], None], wanted: Sequence[str], coverage: Any = None
) -> Iterator[Conversation] | None:
    """The candidates' episodes, in order (lazily: the first that breaks ends the screen), or None where no pair
    can be screened (see the module docstring). ``check`` is called before each pair (it raises to stop the
    screen: the search's allowance); ``coverage``: the template's arms, which the screen's renders count (a steered
    search's)."""
    text = trial_text(ctx, coverage.play if coverage is not None else None, chars=False)

    def kept(conversation: Conversation, compared: Sequence[tuple[Cut, Cut]]) -> list[bool | None]:
        """For each comparison, whether the render of its longer cut begins with its shorter's; None where either is
        refused (each cut rendered once)."""
        renders: dict[Cut, str | None] = {}

        def render(cut: Cut) -> str | None:
            if cut not in renders:
                messages = conversation.messages[: cut[0]] if cut[0] else conversation.messages
                renders[cut] = text(Conversation(messages, conversation.tools, ()), cut[1])
            return renders[cut]

        out: list[bool | None] = []
        for short, long in compared:
            first, second = render(short), render(long)
            out.append(None if first is None or second is None else second.startswith(first))
        return out

    # the comparisons the plainest pair's episode keeps: the rest cannot tell one pair from another
    possible = comparisons(wanted)
    keeps = kept(episode(space, Pair(NAME_SHAPES[0], TEXTS[0])), possible)
    compared = _fewest([c for c, ok in zip(possible, keeps, strict=True) if ok])
    if not compared:
        return None

    def candidates() -> Iterator[Conversation]:
        for pair in pairs(space):
            check()
            candidate = episode(space, pair)
            if False in kept(candidate, compared):
                yield candidate

    return candidates()
