"""How far a template's tests reach past the catalogue's conversations, derived from its code.

The catalogue's conversations are short (at most a few tool cycles, nine messages, one-line answers), and its
texts hold no character a template folds. A template that rewrites history only once ``messages|length > 9``, that
trims an earlier answer past ``|length > 300``, or that replaces ``'\\n'`` in earlier arguments, looks TITO-safe
on all of them. So the numbers a template compares the conversation's length and its texts' lengths with, and the
literals it rewrites text with (``rendering.message_reads``), are read from its code, and a scenario is derived
past each (``derived.derived_scenarios``). What no derived scenario can reach is named (``not_probed``), never
passed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from tito_audit.rendering.message_reads import MessageReads

# A conversation-length threshold up to this is reached by the quick set (two tool cycles, nine messages): a
# ``loop.index0 % 2`` role alternation, a ``messages|length > 1``. Past it, a long episode is derived.
COUNT_REACH = 2
MAX_COUNT = 64  # tool cycles a derived long episode plays at most (a threshold past it is named, not played)
# A text-length threshold up to this is passed by the catalogue's texts; past it, long texts are derived.
LENGTH_REACH = 8
MAX_LENGTH = 20_000  # characters a derived long text holds at most
MAX_LITERALS = 8  # rewrite literals played in one derived scenario
# A literal the template rewrites with, looks for or holds (a table's key) that real tool names and argument keys
# can hold (MCP-style ``github.create_issue``, ``mcp__fs__read``, ``list-files``, ``ns:tool``): at most this long,
# made of letters, digits and these separators, with one other than ``_`` or of underscores only
# (``name|replace('.', '_')``, ``'__' in f.name``; ``tool_call`` is a word any identifier may hold, not a separator
# looked for).
NAME_LITERAL = 8
NAME_SEPARATORS = frozenset("._-:/")
# Characters the long texts of a long episode's first tool cycle may add to its renders in all (each render of the
# episode holds them): past this, the text length is named (``length:N``) for that episode.
LONG_EPISODE_CHARS = 4_000_000
# Characters each text of a long episode's first tool cycle holds at least, where the template tests no longer
# length: a dozen lines in three paragraphs, for a template that keeps an old result's first line or paragraph
# (``splitlines()|first``), squeezes its whitespace or cuts it by a number it does not write as one.
EARLY_CHARS = 1_000
MAX_TESTED = 16  # bare words a template looks for, written in the search's texts
# A number a template tests a ``|length`` with may count the items of a collection, not characters: a call's
# arguments (``arguments|length >= 12``), a list it builds from them, a turn's parallel calls, the items of a list
# argument. The catalogue's calls carry at most two top-level arguments and three parallel calls; for each such
# number N above WIDTH_REACH and below MAX_WIDTH (a larger one is taken for a text length: ``long_text`` plays
# it), a derived episode has a call with N top-level arguments and one with N + 1 (at N exactly, and past it), the
# MAX_WIDTHS largest of those widths (a number left out is named: ``width:N``); each such call's first added argument
# is a list of as many objects, and its last one a key name as long, holding objects nested as deep, up to MAX_DEPTH
# (a number may count a key name's characters or the braces of the arguments' JSON). Widths up to MAX_PARALLEL above
# the catalogue's three are played as that many parallel calls too (``parallel/N``).
WIDTH_REACH = 2
MAX_WIDTH = 256
MAX_WIDTHS = 8
MAX_PARALLEL = 16
MAX_DEPTH = 16
# A length ordered against a value the template's code does not fix (``keys|length > tools|length * 5``) is played
# at this width too: past what such a value is in the scenarios (their tool lists, names, message counts).
UNFIXED_WIDTH = 32


@dataclass(frozen=True)
class Reach:
    """``cycles``: tool cycles of a derived long episode (0: none needed); ``length``: characters each text of a
    derived long-text episode holds (0: none needed); ``literals``: texts a template rewrites with that no delimiter
    pair explains or looks for in text, played in every text of a derived episode; ``tested``: bare words it looks
    for (keys, most often: the search writes them); ``widths``: the top-level arguments of each call of a derived
    wide episode, one call per width (none needed: empty); ``not_probed``: what none of them reaches (``count:N``,
    ``length:N``, ``literal:TEXT``); ``early_length``: characters each text of a long episode's first tool cycle
    holds (a text cut only once it is old enough: ``loop.revindex > 8`` and ``content[:20]``; at least
    ``EARLY_CHARS``; 0: no long episode);
    ``names``: the literals a derived names episode writes in tool names and argument keys, and ``mixed_case``:
    whether they are written in mixed case (a template that folds case or rewrites names with literals: played
    where either is set)."""

    cycles: int = 0
    length: int = 0
    literals: tuple[str, ...] = ()
    not_probed: tuple[str, ...] = ()
    widths: tuple[int, ...] = ()
    tested: tuple[str, ...] = ()  # bare words it looks for (``'image' in part``): the search writes them
    early_length: int = 0
    names: tuple[str, ...] = ()
    mixed_case: bool = False

    @property
    def renames(self) -> bool:
        """Whether a names episode is derived (``derived.names_scenario``)."""
        return self.mixed_case or bool(self.names)


def derive_reach(reads: MessageReads, delimiters: Sequence[str] = (), control_texts: Sequence[str] = ()) -> Reach:
    """What to derive past the catalogue for a template that reads ``reads``. ``delimiters``: the literals its
    reasoning probe plays already (its delimiter pairs); ``control_texts``: the tokenizer's control-token texts
    (sampled text never holds them: ``special_token_injection`` judges them)."""
    not_probed: list[str] = []
    count = max(reads.count_thresholds, default=0)
    cycles = 0
    if count > COUNT_REACH:
        if count < MAX_COUNT:
            cycles = count + 1  # past it in messages, in tool calls and in tool results
        else:
            not_probed.append(f"count:{count}")
    length = max(reads.length_thresholds, default=0)
    chars = 0
    if length > LENGTH_REACH:
        if length < MAX_LENGTH:
            chars = length + 64
        else:
            not_probed.append(f"length:{length}")
    played = set(delimiters)
    literals: list[str] = []
    # the literals it rewrites text with, then those it looks for in text (``'error:' in content``); a bare word
    # it looks for is most often a key (``'image' in part``), left to the search (``tested``)
    rewritten = tuple(reads.rewrite_literals)
    looked_for = [lit for lit in reads.tested_literals if lit not in rewritten and not lit.isidentifier()]
    for lit in (*rewritten, *looked_for):
        if lit in played or lit.strip() in played:
            continue
        if any(c in lit for c in control_texts if c) or len(literals) >= MAX_LITERALS:
            not_probed.append(f"literal:{lit}")
        else:
            literals.append(lit)
    unfixed = [UNFIXED_WIDTH] if reads.length_against_value else []
    numbers = [n for n in (*reads.count_thresholds, *reads.length_thresholds, *unfixed) if WIDTH_REACH < n < MAX_WIDTH]
    every = sorted({w for n in numbers for w in (n, n + 1)})  # at each number, and past it
    widths = every[-MAX_WIDTHS:]
    # a number whose widths were left out (more numbers than one episode plays) is named, never passed; and past
    # MAX_PARALLEL, the parallel calls a number may count (``tool_calls|length > 16``)
    not_probed += [f"width:{n}" for n in sorted(set(numbers)) if n not in widths or n + 1 not in widths]
    # ... where it may count items: not a text's length, characters, lines or words (``text_lengths``)
    items = [n for n in reads.length_thresholds if n not in reads.text_lengths]
    items += [UNFIXED_WIDTH] if reads.length_against_value and not reads.text_against_value else []
    counted = {n for n in (*reads.count_thresholds, *items) if MAX_PARALLEL <= n < MAX_WIDTH}
    not_probed += [f"parallel:{n}" for n in sorted(counted)][:1]
    tested = [lit for lit in reads.tested_literals if lit.isidentifier() and lit not in (*played, *rewritten)]
    tested = tested[:MAX_TESTED]
    # a long episode's first tool cycle holds long texts (past the lengths it tests, and at least EARLY_CHARS of
    # lines and paragraphs): a text cut, squeezed or reduced to its first line only outside the last messages
    fits = [n for n in (max(chars, EARLY_CHARS), EARLY_CHARS) if _long_episode_chars(cycles, n) <= LONG_EPISODE_CHARS]
    early = fits[0] if cycles and fits else 0
    if cycles and chars and early < chars:  # a length past what the episode holds: named, never passed
        not_probed.append(f"length:{length}")
    # the literals a tool name can hold that it rewrites with or looks for, then those its code holds anywhere else
    # (a table of separators it walks: ``{':': '_'}``); played in one episode's names, up to MAX_LITERALS
    names = [lit for lit in dict.fromkeys((*literals, *tested, *reads.held_literals)) if _in_names(lit)]
    names = names[:MAX_LITERALS]
    return Reach(
        cycles,
        chars,
        tuple(literals),
        tuple(not_probed),
        tuple(widths),
        tuple(tested),
        early,
        tuple(names),
        reads.folds_case,
    )


def _in_names(literal: str) -> bool:
    """Whether ``literal`` is something a tool name or an argument key can hold (``NAME_LITERAL``): a word joined by
    underscores (``tool_call``) is one an identifier holds anyway, not a separator looked for."""
    return (
        0 < len(literal) <= NAME_LITERAL
        and all(c.isascii() and (c.isalnum() or c in NAME_SEPARATORS) for c in literal)
        and (any(c in NAME_SEPARATORS - {"_"} for c in literal) or set(literal) == {"_"})
    )


def _long_episode_chars(cycles: int, chars: int) -> int:
    """What a long episode's long first cycle adds to its renders: its texts (its call's content, reasoning and
    string argument, its result: four) in each of the episode's renders (two a cycle, and the follow-up's)."""
    return 4 * chars * (2 * cycles + 6)


PARAGRAPH_LINES = 5  # lines of a long text's paragraph


def long_text(chars: int, what: str) -> str:
    """Prose of at least ``chars`` characters, a numbered sentence a line and a blank line every ``PARAGRAPH_LINES`` (as
    a long answer or a log reads): long in characters, words, lines and paragraphs alike, for a template that cuts a
    text by any of them (``content[:300]``, ``content.split('\\n')[:3]``, ``split(' ')[:400]``,
    ``split('\\n\\n')|first``)."""
    out: list[str] = []
    total = 0
    while total < chars + 2:  # the last line's end is cut off
        end = "\n\n" if len(out) % PARAGRAPH_LINES == PARAGRAPH_LINES - 1 else "\n"  # a paragraph every few lines
        out.append(f"{what} {len(out)}: the forecast for Paris says sunny with a light wind from the west.{end}")
        total += len(out[-1])
    return "".join(out).rstrip("\n")


def long_line(chars: int) -> str:
    """One line of at least ``chars`` characters: minified JSON, as an API or a file tool returns it (a template
    that cuts a result's lines, or a text without line ends, keeps every line of ``long_text``)."""
    records: list[str] = []
    total = 2
    while total < chars + 2:
        records.append(f'{{"id":{len(records)},"city":"Paris","temp_c":{18 + len(records) % 7},"sky":"sunny"}}')
        total += len(records[-1]) + 1
    return "[" + ",".join(records) + "]"


def with_literals(text: str, literals: Sequence[str]) -> str:
    """``text`` with every literal written into it, as it is and, for a JSON escape (``\\n``, ``\\"``), as the
    character it stands for (a template may test the literal on the JSON it writes the value as)."""
    forms: list[str] = []
    for lit in literals:
        forms.append(lit)
        try:
            decoded = json.loads(f'"{lit}"')
        except ValueError:
            continue
        if isinstance(decoded, str) and decoded != lit:
            forms.append(decoded)
    return " ".join([text, *forms, "end"])
