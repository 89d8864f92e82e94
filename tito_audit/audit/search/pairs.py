"""Pairs of values within one message: every name shape with every text core in one tool cycle, screened by text.

The sweeps and the draws put values into a conversation one at a time: each name shape meets a few text cores in a
result, never all of them. A template may rewrite an earlier message only where two of its values say something
together: a result whose tool name is dotted and whose content is digits alone (``tests/data/search/pairs/``). Met
as conversations, every name shape with every text core is some five hundred tool cycles, and each breaks only where
its pair is the one result of its append: thousands of renders of long episodes.

So each pair is screened first, by trial renders of one short episode (``episode``): a user turn, a call of that
name given that core, its result named so and holding it, an answer, a user turn and another answer. Each
comparison (``comparisons``) is of two renders of it, a shorter cut that a longer one must begin with: the call turn
last (the model's turn, as the loop renders it to read the sample) against the prompt after the result's append
(buffer + delta), and the call turn last or the result last against the whole episode (the re-render). Only the
comparisons of the kinds the search looks for are made, and only those the plainest pair's episode
(``NAME_SHAPES[0]``, ``TEXTS[0]``) keeps: a pair that fails one of them is a candidate, a call or a result the
template renders otherwise once more follows. A candidate is played as any conversation of the search is (judged by
tokens, shrunk, shown at its first divergent token): the screen only chooses what is played, at most
``MAX_CANDIDATES`` of them (past them, the search names it: ``search:pairs:stopped``). A pair the template refuses
is one a loop cannot send it, and is skipped; where the template refuses the plainest pair's episode, or keeps none
of its comparisons, no pair can be screened, and the search names it (``search:refused:pairs``).

Its renders are trials (``Renderer.render_trial``): charged to the template's budget, neither cached nor counted by
template coverage; each cut is rendered once per pair.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from tito_audit.audit.search.accepted import trial_text
from tito_audit.audit.search.conversations import SHORT, SWEEP, declarations, placed
from tito_audit.audit.search.property import APPEND, RERENDER
from tito_audit.audit.search.space import NAME_SHAPES, TEXTS, SearchSpace
from tito_audit.audit.search.sweep import sweep_turn
from tito_audit.scenarios.searched import Conversation, Message

if TYPE_CHECKING:
    from tito_audit.audit.context import AuditContext

UNSCREENED = "pairs"  # the name ``SearchResult.unplayed`` gives a screen that could not run
_CALL, _RESULT = 1, 2  # where an episode (``episode``) has its call turn and its result


def episode(space: SearchSpace, name: str, text: str, k: int = 0) -> Conversation:
    """The short episode of one pair: a call of ``name`` given ``text`` (and the ``k``-th argument value of the sweep
    of values), its result named ``name`` holding ``text``, then an answer, a user turn and another answer."""
    call = {
        "type": "function",
        "function": {"name": name, "arguments": {"query": text, "value": SWEEP[k % len(SWEEP)]}},
    }
    messages: list[Message] = [
        {"role": "user", "content": "What's the weather in Paris?"},
        *placed(sweep_turn(space, None, call), [text], [0]),
        sweep_turn(space, "It is sunny in Paris."),
        {"role": "user", "content": "Thanks. And tomorrow?"},
        sweep_turn(space, "Rain tomorrow.", k=1),
    ]
    return Conversation(tuple(messages), declarations(messages), ())


def pairs(space: SearchSpace) -> list[tuple[str, str]]:
    """Every name shape with every text core (cut to ``SHORT`` characters: the lengths a template tests are the
    sweep of texts'), name by name."""
    texts = list(dict.fromkeys(t[:SHORT] for t in space.texts))
    return [(name, text) for name in NAME_SHAPES for text in texts]


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


def comparisons(wanted: Sequence[str]) -> tuple[tuple[Cut, Cut], ...]:
    """The comparisons that can show a break of a kind ``wanted``: the sampled call re-rendered when its result is
    appended (buffer + delta), and the call or the result re-rendered in the whole episode (the re-render)."""
    return (APPEND_COMPARISONS if APPEND in wanted else ()) + (RERENDER_COMPARISONS if RERENDER in wanted else ())


def screened(
    ctx: AuditContext, space: SearchSpace, check: Callable[[], None], wanted: Sequence[str]
) -> Iterator[Conversation] | None:
    """The candidates' episodes, in order (lazily: the first that breaks ends the screen), or None where no pair
    can be screened (see the module docstring). ``check`` is called before each pair (it raises to stop the
    screen: the search's allowance)."""
    text = trial_text(ctx)

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
    keeps = kept(episode(space, NAME_SHAPES[0], TEXTS[0]), possible)
    compared = [c for c, ok in zip(possible, keeps, strict=True) if ok]
    if (_RESULT + 1, False) in {short for short, _ in compared}:  # one render of the result last is enough
        compared = [c for c in compared if c[0] != (_RESULT + 1, True)]
    if not compared:
        return None

    def candidates() -> Iterator[Conversation]:
        for k, (name, core) in enumerate(pairs(space)):
            check()
            candidate = episode(space, name, core, k)
            if False in kept(candidate, compared):
                yield candidate

    return candidates()
