"""What a template's code reads from messages and looks for in text, read from its syntax tree.

Two readings, made once per template with its other facts (``analysis.template_facts``), that the scenarios are
derived from (``scenarios.reasoning``), so that a template is played with what it reads instead of a fixed list:

- ``message_keys``: every key the template reads from a message (``message.k``, ``message['k']``,
  ``message.get('k')``, ``'k' in message``). A message is followed through the code: a loop over ``messages``
  (or over a list built from it: ``set loop_messages = messages[1:]``, ``ns.messages``), an item of such a list,
  a variable set from a message, a macro parameter given one, ``loop.previtem``/``nextitem`` of such a loop.
- ``tested_literals``: the string constants the template splits, strips, replaces or tests text with
  (``content.split('</think>')``, ``'</think>' in content``, ``|replace('<think>', '')``), a variable set to a
  constant counting as that constant (``set think_end = '</seed:think>'``); ``rewrite_literals`` those of them it
  splits, strips or replaces (text it changes, not only looks for).
- ``count_thresholds``: the numbers it compares the conversation's length with (``messages|length > 9``, a
  ``loop.index``/``loop.revindex``/``loop.length`` test, a variable set from those or counting up
  (``set ns.calls = ns.calls + 1``), a slice of the messages, ``messages[-10:]``, a position or arithmetic of
  those, ``messages[loop.index0 + 6] is defined``, ``loop.revindex0 // 7``; the loop under another name too,
  ``set outer = loop`` or a macro's parameter given it): a branch a longer conversation takes and a short one never
  does.
- ``length_thresholds``: the numbers it compares or cuts text with (``content|length > 300``, ``content[:300]``,
  ``|truncate(300)``, ``text.count(':') >= 12``, ``keys|map('length')|max > 24``, an item's index:
  ``keys[11]``; a word count, ``text|wordcount > 1000``, and a cut by words or lines, ``text.split(' ')[:400]``,
  ``text.split('\\n')[:3]`` (the split kept in a variable too), also as ``CHARACTERS_PER_WORD`` or
  ``CHARACTERS_PER_LINE`` times as many characters):
  a branch only longer text (or a longer key name, a longer list) takes; and those it sizes a list with
  (``[0] * 11``, a list walked beside another: ``loop.cycle``). Each may count items instead of characters
  (``arguments|length >= 12``): ``scenarios.reach`` plays both. ``length_against_value``: a length it orders
  against a value its code does not fix (``keys|length > tools|length * 5``).
- ``folds_case``: it changes some text's letter case (``f.name|lower``, ``role.capitalize()``).
- ``held_literals``: the short string constants anywhere in its code, a table's keys and items too
  (``{'.': '_', ':': '_'}``, ``['.']``): a separator it may rewrite tool names with, read where no call shows it.

A number is read where the code fixes it without running anything (``fixed_values``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from jinja2 import nodes

from tito_audit.rendering.fixed_values import (
    COUNT_FILTERS,
    FixedValues,
    assigned_name,
    assigned_names,
    attribute_name,
    variable_name,
)
from tito_audit.rendering.text_values import TextValues
from tito_audit.rendering.tree_order import descendants

# Methods and filters that change the text they are given by their constant arguments (not only look for them).
_REWRITE_METHODS = frozenset({"split", "rsplit", "partition", "rpartition", "strip", "lstrip", "rstrip", "replace"})
# String methods and filters whose constant arguments are text the template looks for.
_TEXT_METHODS = _REWRITE_METHODS | frozenset(
    {"startswith", "endswith", "find", "rfind", "index", "rindex", "count", "removeprefix", "removesuffix"}
)
_TEXT_FILTERS = frozenset({"replace", "trim"})
# Filters and str methods that change a text's letter case (``f.name|lower``, ``role.capitalize()``).
_CASE_FILTERS = frozenset({"lower", "upper", "title", "capitalize"})
_CASE_METHODS = frozenset({*_CASE_FILTERS, "swapcase", "casefold"})
# Filters of a list of messages that give a list of messages, and those that give one message.
_LIST_FILTERS = frozenset({"list", "reverse", "select", "reject", "selectattr", "rejectattr", "unique", "sort"})
_ONE_FILTERS = frozenset({"first", "last", "random"})
# What a variable holds: a list of messages, one message, or jinja's ``loop`` (``set outer = loop``, a macro's
# parameter given it: its counters count the conversation as ``loop``'s do)
_LIST, _ONE, _LOOP = "list", "one", "loop"
_READ = (
    nodes.Getattr,
    nodes.Getitem,
    nodes.Call,
    nodes.Compare,
    nodes.Filter,
    nodes.Assign,
    nodes.For,
    nodes.Macro,
    nodes.Mul,
    nodes.Add,
    nodes.Sub,
    nodes.Div,
    nodes.FloorDiv,
    nodes.Mod,
)  # what an expression is: a list of messages, or one message; and a list sized by a number


# Attributes of a jinja loop that count iterations, and filters that count a list.
_LOOP_COUNTERS = frozenset({"index", "index0", "revindex", "revindex0", "length"})
_ITEM_INDEX = 256  # an item read at a fixed position below this may count items (``keys[11]``)
CHARACTERS_PER_WORD = 8  # characters a derived text is given per word a template counts (``|wordcount > 1000``)
CHARACTERS_PER_LINE = 80  # ... and per line it counts (``content.split('\n')[:3]``: a text's first three lines)
HELD_LITERAL = 16  # characters of a string constant kept in ``held_literals``, at most
MAX_HELD = 64  # ... and how many
# Arithmetic a conversation's length may go through before a test or a position reads it (``loop.revindex0 // 7``)
_ARITHMETIC = (nodes.Add, nodes.Sub, nodes.Mul, nodes.Div, nodes.FloorDiv, nodes.Mod)
_TRUNCATE_DEFAULT = 255  # jinja's ``truncate`` length when none is given


@dataclass(frozen=True)
class MessageReads:
    message_keys: frozenset[str] = frozenset()
    tested_literals: tuple[str, ...] = ()
    rewrite_literals: tuple[str, ...] = ()
    count_thresholds: tuple[int, ...] = ()
    length_thresholds: tuple[int, ...] = ()
    # a length ordered against a value its code does not fix (``keys|length > tools|length * 5``, ``> messages|length``)
    length_against_value: bool = False
    # it changes some text's letter case (``f.name|lower``): a mixed-case name (``getWeather``) comes out otherwise
    folds_case: bool = False
    # the short string constants its code holds anywhere (a separator in a table it walks: ``{':': '_'}``), in order
    held_literals: tuple[str, ...] = ()
    # those of ``length_thresholds`` read only as a text's length, its characters, lines or words
    # (``(message.content|string)|length == 40``, ``text.split('\n')[:3]``): none of them counts calls
    text_lengths: tuple[int, ...] = ()
    # every length ``length_against_value`` orders is a text's (``c.count('.') >= lines|length``)
    text_against_value: bool = False
    # the characters ``str.translate`` rewrites (``c.translate({8216: 39})``, ``maketrans('‘’', "''")``), in order: the
    # search writes them (red team 29); not a literal of the derived scenarios, whose checks would read a result
    # translated on every turn as one dropped
    translated: str = ""


def read_messages(tree: nodes.Template, everything: list[nodes.Node] | None = None) -> MessageReads:
    """The message keys the template reads and the literals it tests text with (see the module docstring).
    ``everything``: the tree's ``descendants`` where the caller has them."""
    return _Reader(tree, everything).result()


class _Reader(FixedValues):
    def __init__(self, tree: nodes.Template, everything: list[nodes.Node] | None = None) -> None:
        super().__init__()
        # one walk of the tree; every reading below goes over this list
        everything = descendants(tree) if everything is None else everything
        self.nodes = [n for n in everything if isinstance(n, _READ)]
        # the short string constants anywhere in its code, a table's items too (``{':': '_', '/': '_'}``)
        short = (n.value for n in everything if isinstance(n, nodes.Const) and type(n.value) is str)
        self.held = tuple(dict.fromkeys(v for v in short if 0 < len(v) <= HELD_LITERAL))[:MAX_HELD]
        self.kinds: dict[str, str] = {"messages": _LIST, "loop": _LOOP}  # variable (or ``ns.attr``) -> what it holds
        self.macros = {m.name: m for m in self.nodes if isinstance(m, nodes.Macro)}
        self.loops_over_messages = False
        self.pieces: dict[str, int] = {}  # variables holding a text's lines or words (``_piece_chars``)
        # the numbers read as a text's length (``text_lengths``), and those read as a length that may count items
        self.text_numbers: set[int] = set()
        self.item_numbers: set[int] = set()
        self.items_against_value = False  # a length ordered against a value that may count items
        self.textual = TextValues([], {})  # which expressions are texts (set in ``_bind``)

    def result(self) -> MessageReads:
        self._bind()
        keys: set[str] = set()
        calls_of = {id(n.node) for n in self.nodes if isinstance(n, nodes.Call)}
        for node in self.nodes:
            if isinstance(node, nodes.Getattr) and id(node) not in calls_of:
                if self.kind(node.node) == _ONE:
                    keys.add(node.attr)
            elif isinstance(node, nodes.Getitem) and self.kind(node.node) == _ONE:
                key = self.constant(node.arg)
                if key is not None:
                    keys.add(key)
            elif isinstance(node, nodes.Call):
                fn = node.node
                if isinstance(fn, nodes.Getattr) and fn.attr == "get" and node.args and self.kind(fn.node) == _ONE:
                    key = self.constant(node.args[0])
                    if key is not None:
                        keys.add(key)
            elif (
                isinstance(node, nodes.Compare)
                and len(node.ops) == 1
                and node.ops[0].op in ("in", "notin")
                and self.kind(node.ops[0].expr) == _ONE
            ):
                key = self.constant(node.expr)
                if key is not None:
                    keys.add(key)
        counts, lengths, against_value = self._thresholds()
        self.text_numbers -= self.item_numbers
        return MessageReads(
            frozenset(keys),
            tuple(dict.fromkeys(self._tested())),
            tuple(dict.fromkeys(self._tested(rewrites_only=True))),
            tuple(sorted(counts)),
            tuple(sorted(lengths)),
            against_value,
            self._folds_case(),
            self.held,
            tuple(sorted(self.text_numbers & lengths)),
            against_value and not self.items_against_value,
            "".join(dict.fromkeys(self._translated())),
        )

    # -- what each variable holds, to a fixed point
    def _bind(self) -> None:
        binders = [
            n
            for n in self.nodes
            if isinstance(n, nodes.Assign | nodes.For)
            or (isinstance(n, nodes.Call) and isinstance(n.node, nodes.Name) and n.node.name in self.macros)
        ]
        self.bind_values(self.nodes)
        # the variables that hold a text's pieces (``set words = content.split(' ')``): what one of them stands for
        self.pieces = {
            name: piece
            for n in binders
            if isinstance(n, nodes.Assign)
            and (name := assigned_name(n.target)) is not None
            and (piece := self._piece_chars(n.node)) > 1
        }
        assigns = [(assigned_name(n.target), n.node) for n in self.nodes if isinstance(n, nodes.Assign)]
        self.textual = TextValues([(name, value) for name, value in assigns if name is not None], self.pieces)
        for _ in range(8):
            before = dict(self.kinds)
            for node in binders:
                if isinstance(node, nodes.Assign):
                    self._set(assigned_name(node.target), self.kind(node.node))
                elif isinstance(node, nodes.For):
                    if self.kind(node.iter) == _LIST:
                        self.loops_over_messages = True
                        for name in assigned_names(node.target):
                            self._set(name, _ONE)
                elif isinstance(node, nodes.Call) and isinstance(node.node, nodes.Name):  # one of its macros
                    macro = self.macros[node.node.name]
                    for param, arg in zip(macro.args, node.args, strict=False):
                        self._set(param.name, self.kind(arg))
            if self.kinds == before:
                break

    def _set(self, name: str | None, kind: str | None) -> None:
        if name is not None and kind is not None and name not in self.kinds:
            self.kinds[name] = kind

    def kind(self, node: nodes.Node) -> str | None:
        """A list of messages, one message, jinja's ``loop`` under some name, or none of them (None)."""
        if isinstance(node, nodes.Name):
            return self.kinds.get(node.name)
        if isinstance(node, nodes.Getattr):
            if isinstance(node.node, nodes.Name):
                if node.node.name == "loop" and node.attr in ("previtem", "nextitem"):
                    return _ONE if self.loops_over_messages else None
                return self.kinds.get(f"{node.node.name}.{node.attr}")
            return None
        if isinstance(node, nodes.Getitem):
            if self.kind(node.node) == _LIST:
                return _LIST if isinstance(node.arg, nodes.Slice) else _ONE
            return None
        if isinstance(node, nodes.Filter) and node.node is not None and self.kind(node.node) == _LIST:
            return _LIST if node.name in _LIST_FILTERS else _ONE if node.name in _ONE_FILTERS else None
        if isinstance(node, nodes.Add | nodes.Concat):
            parts = [node.left, node.right] if isinstance(node, nodes.Add) else node.nodes
            return _LIST if any(self.kind(p) == _LIST for p in parts) else None
        if isinstance(node, nodes.CondExpr):
            return self.kind(node.expr1) or (self.kind(node.expr2) if node.expr2 is not None else None)
        if isinstance(node, nodes.List):
            return _LIST if any(self.kind(i) == _ONE for i in node.items) else None
        return None

    def _folds_case(self) -> bool:
        return any(_folds(node) for node in self.nodes)

    def _tested(self, rewrites_only: bool = False) -> Iterable[str]:
        methods = _REWRITE_METHODS if rewrites_only else _TEXT_METHODS
        for node in self.nodes:
            if isinstance(node, nodes.Call):
                if isinstance(node.node, nodes.Getattr) and node.node.attr in methods:
                    yield from self._constants(node.args)
            elif isinstance(node, nodes.Filter):
                if node.name in _TEXT_FILTERS:
                    yield from self._constants(node.args)
            elif (
                isinstance(node, nodes.Compare)
                and not rewrites_only
                and any(op.op in ("in", "notin") for op in node.ops)
            ):
                yield from self._constants([node.expr])

    def _translated(self) -> Iterable[str]:
        """The characters ``str.translate`` rewrites: a table's code points (``c.translate({8216: 39})``, a table set
        in a variable too) and ``maketrans``'s first argument (``c.maketrans('‘’', "''")``)."""
        tables = {
            name: n.node
            for n in self.nodes
            if isinstance(n, nodes.Assign) and isinstance(n.node, nodes.Dict) and (name := assigned_name(n.target))
        }
        for node in self.nodes:
            if not (isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr) and node.args):
                continue
            arg = node.args[0]
            if node.node.attr == "maketrans":
                yield from self.constant(arg) or ""
            elif node.node.attr == "translate":
                table = tables.get(arg.name) if isinstance(arg, nodes.Name) else arg
                if isinstance(table, nodes.Dict):
                    for pair in table.items:
                        key = pair.key.value if isinstance(pair.key, nodes.Const) else None
                        if type(key) is int and 0 < key < 0x110000:
                            yield chr(key)
                        elif type(key) is str and len(key) == 1:
                            yield key

    # -- the numbers the conversation's length and its texts' lengths are tested against
    def _thresholds(self) -> tuple[set[int], set[int], bool]:
        counters = self._counters()
        counts: set[int] = set()
        lengths: set[int] = set()
        against_value = False
        for node in self.nodes:
            if isinstance(node, nodes.Compare):
                parts = [node.expr, *(op.expr for op in node.ops)]
                numbers = {n for p in parts for n in self.numbers_in(p)}
                measured = [p for p in parts if self._measures(p)]
                if any(self._counts(p, counters) for p in parts):
                    counts |= numbers
                elif measured:
                    lengths |= numbers
                    self._read_as(numbers, all(self.textual.measures_text(p) for p in measured))
                    if any(_counts_words(p) for p in measured):  # a text of that many words is longer
                        lengths |= {n * CHARACTERS_PER_WORD for n in numbers}
                        self.text_numbers |= {n * CHARACTERS_PER_WORD for n in numbers}
                ordered = all(op.op in ("gt", "gteq", "lt", "lteq") for op in node.ops)
                lengths_ordered = [p for p in measured if _is_length(p)]
                unfixed = [p for p in parts if self.whole_number(p) is None]  # the length itself, and another
                if ordered and lengths_ordered and len(unfixed) > 1:
                    against_value = True
                    if not all(self.textual.measures_text(p) for p in lengths_ordered):
                        self.items_against_value = True
            elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
                bounds = {n for b in (node.arg.start, node.arg.stop) if b is not None for n in self.numbers_in(b)}
                (counts if self.kind(node.node) == _LIST else lengths).update(bounds)
                if self.kind(node.node) != _LIST:
                    self._read_as(bounds, self.textual.is_text(node.node) or self._piece_chars(node.node) > 1)
                if (piece := self._piece_chars(node.node)) > 1:  # a text's first lines or words
                    lengths |= {n * piece for n in bounds}
                    self.text_numbers |= {n * piece for n in bounds}
            elif (
                isinstance(node, nodes.Getitem) and self.kind(node.node) == _LIST and self._counted(node.arg, counters)
            ):
                counts |= self.numbers_in(node.arg)  # ``messages[loop.index0 + 6] is defined``: six more messages
            elif isinstance(node, nodes.Getitem) and (index := self.whole_number(node.arg)) is not None:
                # an item that exists from that many items on (``keys[11] is defined``: 12 arguments; ``[-3]``: 3);
                # a larger number is a key (``budgets[16384]``, a dict keyed by numbers), not a position
                if abs(index) < _ITEM_INDEX:
                    items = index + 1 if index >= 0 else -index
                    (counts if self.kind(node.node) == _LIST else lengths).add(items)
                    if self.kind(node.node) != _LIST:
                        self._read_as({items}, self.textual.is_text(node.node) or self._piece_chars(node.node) > 1)
                    if (piece := self._piece_chars(node.node)) > 1:
                        lengths.add(items * piece)
                        self.text_numbers.add(items * piece)
            elif isinstance(node, _ARITHMETIC) and self._counted(node, counters):
                # arithmetic of the conversation's length tested for its truth or used as a position
                # (``loop.revindex0 // 7``): a branch from that many messages on
                counts |= {
                    n
                    for side in (node.left, node.right)
                    if not self._counted(side, counters)
                    for n in self.numbers_in(side)
                }
            elif isinstance(node, nodes.Mul) and isinstance(node.left, nodes.List | nodes.Tuple):
                lengths |= self.numbers_in(node.right)  # ``[0] * 11``: a list of that many items, paired with others
                self.item_numbers |= self.numbers_in(node.right)
            elif isinstance(node, nodes.Mul) and isinstance(node.right, nodes.List | nodes.Tuple):
                lengths |= self.numbers_in(node.left)
                self.item_numbers |= self.numbers_in(node.left)
            elif isinstance(node, nodes.Filter) and node.name == "truncate":  # a text's filter
                given = [*node.args[:1], *(kw.value for kw in node.kwargs if kw.key == "length")]
                cut = {n for g in given for n in self.numbers_in(g)} if given else {_TRUNCATE_DEFAULT}
                lengths |= cut
                self.text_numbers |= cut
        return counts, lengths, against_value

    def _read_as(self, numbers: set[int], text: bool) -> None:
        (self.text_numbers if text else self.item_numbers).update(numbers)

    def _piece_chars(self, node: nodes.Node) -> int:
        """The characters one item of ``node`` stands for, where ``node`` splits a text into pieces: a line
        (``text.split('\\n')``, ``splitlines()``) or a word (``text.split(' ')``, ``split()``); 1 for anything else
        (a text's own characters, or pieces between other separators: ``split('</think>')``)."""
        if isinstance(node, nodes.Name):
            return self.pieces.get(node.name, 1)
        if isinstance(node, nodes.CondExpr):  # ``v.split('\n') if v is string else []``
            return max(self._piece_chars(node.expr1), 1 if node.expr2 is None else self._piece_chars(node.expr2))
        if not (isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr)):
            return 1
        method = node.node.attr
        if method == "splitlines":
            return CHARACTERS_PER_LINE
        if method not in ("split", "rsplit"):
            return 1
        given = node.args[0] if node.args else None
        whitespace = given is None or (isinstance(given, nodes.Const) and given.value is None)  # ``split()``
        separator = " " if whitespace else self.constant(given)  # type: ignore[arg-type]
        if separator is None or separator.strip():  # a separator that is no whitespace: the pieces are no words
            return 1
        return CHARACTERS_PER_LINE if "\n" in separator else CHARACTERS_PER_WORD

    def _counters(self) -> set[str]:
        """Variables (``ns.attr`` too) that count messages or iterations: set from a loop counter or a messages
        length, or counting up from themselves (``set n = n + 1``)."""
        found: set[str] = set()
        assigns = [
            (name, n.node) for n in self.nodes if isinstance(n, nodes.Assign) and (name := assigned_name(n.target))
        ]
        for _ in range(4):
            before = len(found)
            for name, value in assigns:
                if name not in found and (self._counts(value, found) or _counts_up(value, name)):
                    found.add(name)
            if len(found) == before:
                break
        return found

    def _counts(self, node: nodes.Node, counters: set[str]) -> bool:
        """``node`` reads the conversation's length somewhere in it (``_is_counter``)."""
        subs = [node, *node.find_all((nodes.Filter, nodes.Getattr, nodes.Name))]
        return any(self._is_counter(sub, counters) for sub in subs)

    def _counted(self, node: nodes.Node, counters: set[str]) -> bool:
        """``node`` is the conversation's length itself, or arithmetic of it (``loop.index0 + 6``); not an expression
        that merely holds one (``'x' + (a if old)``)."""
        if isinstance(node, _ARITHMETIC):
            return self._counted(node.left, counters) or self._counted(node.right, counters)
        return self._is_counter(node, counters)

    def _is_counter(self, node: nodes.Node, counters: set[str]) -> bool:
        """``node`` is a read of the conversation's length: a messages list's length, a loop counter (of ``loop``
        under any name), a counter variable."""
        if isinstance(node, nodes.Filter) and node.name in COUNT_FILTERS and node.node is not None:
            return self.kind(node.node) == _LIST
        if isinstance(node, nodes.Getattr) and self.kind(node.node) == _LOOP and node.attr in _LOOP_COUNTERS:
            return True
        return isinstance(node, nodes.Name | nodes.Getattr) and variable_name(node) in counters

    def _measures(self, node: nodes.Node) -> bool:
        """``node`` reads the length of something other than the messages list (a text, most often), or counts what
        a text holds (``text.count(':')``)."""
        for sub in [node, *node.find_all((nodes.Filter, nodes.Call))]:
            if (
                isinstance(sub, nodes.Filter)
                and sub.name in COUNT_FILTERS
                and sub.node is not None
                and self.kind(sub.node) != _LIST
            ):
                return True
            if _given(sub, ("map",)) in COUNT_FILTERS:  # ``keys|map('length')|max``: each item's length
                return True
            if isinstance(sub, nodes.Filter) and sub.name == "wordcount":
                return True
            if isinstance(sub, nodes.Call) and isinstance(sub.node, nodes.Getattr) and sub.node.attr == "count":
                return True
        return False

    def _constants(self, args: Iterable[nodes.Node]) -> Iterable[str]:
        for arg in args:
            value = self.constant(arg)
            if value and value.strip():
                yield value


def _folds(node: nodes.Node) -> bool:
    """Whether ``node`` names a change of letter case: ``|lower``, a str method called (``.capitalize()``) or kept
    (``set fold = name.lower``; not ``.title``, a JSON schema's key), or given by name (``|map('lower')``)."""
    if isinstance(node, nodes.Filter):
        return node.name in _CASE_FILTERS or _given(node, ("map", "attr")) in _CASE_METHODS
    if isinstance(node, nodes.Call):
        return isinstance(node.node, nodes.Getattr) and node.node.attr in _CASE_METHODS
    return isinstance(node, nodes.Getattr) and node.attr in _CASE_METHODS - {"title"}


def _counts_words(node: nodes.Node) -> bool:
    """``node`` counts words (``text|wordcount``)."""
    return any(isinstance(n, nodes.Filter) and n.name == "wordcount" for n in [node, *node.find_all(nodes.Filter)])


def _given(node: nodes.Node, filters: tuple[str, ...]) -> str | None:
    """The name ``node``, one of ``filters``, is given as its first argument (``map('length')``: ``length``)."""
    first = node.args[0] if isinstance(node, nodes.Filter) and node.name in filters and node.args else None
    return first.value if isinstance(first, nodes.Const) and isinstance(first.value, str) else None


def _is_length(node: nodes.Node) -> bool:
    """``node`` is a length or a count itself (``x|length``, ``text.count(':')``, arithmetic of one), not a test
    that holds one (``(x|length > 3) > loop.last``)."""
    if isinstance(node, nodes.Filter):
        return node.name in COUNT_FILTERS
    if isinstance(node, nodes.Call):
        return isinstance(node.node, nodes.Getattr) and node.node.attr == "count"
    if isinstance(node, nodes.BinExpr):
        return _is_length(node.left) or _is_length(node.right)
    return False


def _counts_up(node: nodes.Node, name: str) -> bool:
    """``node`` is ``name`` plus or minus a number (``ns.calls + 1``)."""
    if not isinstance(node, nodes.Add | nodes.Sub):
        return False
    sides = (node.left, node.right)
    number = any(isinstance(s, nodes.Const) and type(s.value) is int for s in sides)
    return number and any(assigned_name(s) == name or attribute_name(s) == name for s in sides)
