"""Patches (b) and (d): ``{% generation %}`` markers around what the model samples, stop token included.

transformers' ``return_assistant_tokens_mask`` marks the characters rendered inside ``{% generation %}``
blocks. The sampled text of an assistant turn starts where the generation prompt ends and stops just after
the stop token. We learn the header (what the generation prompt and the rendered turn share) by rendering
a probe, then walk the message loop as it runs for an assistant message, consuming the header from the
statically known pieces (literals, the role, special-token variables) and placing the block tags at the two
places, splitting an output or a string literal when a place lies inside one. Where the walk passes code that
other roles run too, the loop body is specialised: an assistant-only copy carries the markers.

Markers that exist but leave the stop token outside (d) are removed first and placed again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tito_audit.fix.common import FixContext, Patch, Skip, loop_target, parse_expr, rendering_loops
from tito_audit.fix.source import (
    Block,
    Data,
    Edit,
    Leaf,
    Node,
    PatchError,
    Source,
    Tag,
    Tok,
    apply_edits,
    block_tag,
    block_tags,
    chain_operands,
    in_data,
    left_before,
    literal_of,
    right_after,
    split_literal,
    walk,
)
from tito_audit.probes import MARKER
from tito_audit.rollout.tokens import common_prefix_len

ID_MARKERS = "generation_markers"
ID_STOP = "stop_in_mask"
_OTHER_ROLES = ("user", "system", "tool", "developer", "function", "ipython")


@dataclass(frozen=True)
class _State:
    phase: str  # "header": still inside the generation prompt | "body": sampled text | "done": past the stop
    rem: str = ""  # header text not yet rendered


@dataclass
class _Cut:
    """A block tag to insert inside one output: before operand ``index`` or inside its literal at ``offset``."""

    index: int
    offset: int | None
    keyword: str
    order: int


class _Abort(Exception):
    pass


class _Raises(_Abort):
    """This path calls ``raise_exception``: no conversation renders through it."""


@dataclass
class _Plan:
    inserts: list[Edit] = field(default_factory=list)
    cuts: dict[int, list[_Cut]] = field(default_factory=dict)  # var tag start -> cuts
    shared: bool = False  # some marker lies in code that other roles run too
    stop_found: bool = False


def header_text(fx: FixContext, template: str) -> str:
    """What the rendered assistant turn shares with the generation prompt (default template kwargs)."""
    from tito_audit.rendering.renderer import RenderError

    renderer = fx.renderer(template)
    base = [{"role": "user", "content": "Hi"}]
    try:
        before = renderer.render(base)
        prompt = renderer.render(base, add_generation_prompt=True)
        full = renderer.render([*base, {"role": "assistant", "content": MARKER}])
    except RenderError as exc:
        raise PatchError(f"the probe conversation does not render: {exc.message}") from exc
    if not full.startswith(before) or MARKER not in full:
        raise PatchError("an assistant turn does not render after the history (the template reorders turns)")
    turn, gen = full[len(before) :], prompt[len(before) :] if prompt.startswith(before) else ""
    return turn[: common_prefix_len(gen, turn)]


class _Planner:
    def __init__(self, src: Source, loop: Block, header: str, stops: Sequence[str], known: dict[str, str]) -> None:
        self.src = src
        self.loop = loop
        self.header = header
        self.stops = [s for s in stops if s]
        self.known = dict(known)
        self.names = set(loop_target(loop))
        self.plan = _Plan()
        self.order = 0

    # -- static evaluation ---------------------------------------------------------------------------------

    def _is_role(self, e: Any) -> bool:
        from jinja2 import nodes

        if isinstance(e, nodes.Getattr) and isinstance(e.node, nodes.Name):
            return e.node.name in self.names and e.attr == "role"
        if isinstance(e, nodes.Getitem) and isinstance(e.node, nodes.Name) and isinstance(e.arg, nodes.Const):
            return e.node.name in self.names and e.arg.value == "role"
        return False

    def value(self, toks: Sequence[Tok]) -> str | None:
        """The text an operand prints for an assistant message, when it is known without running anything."""
        lit = literal_of(toks)
        if lit is not None:
            return lit
        if len(toks) == 1 and toks[0].kind == "name" and toks[0].value in self.known:
            return self.known[toks[0].value]
        try:
            e = parse_expr(self.src.span_text(toks))
        except PatchError:
            return None
        return "assistant" if self._is_role(e) else None

    def decide(self, toks: Sequence[Tok], role: str = "assistant") -> bool | None:
        """A test's value when it only depends on the message role."""
        from jinja2 import nodes

        try:
            e = parse_expr(self.src.span_text(toks))
        except PatchError:
            return None

        def ev(n: Any) -> bool | None:
            if isinstance(n, nodes.And):
                a, b = ev(n.left), ev(n.right)
                return False if a is False or b is False else (True if a and b else None)
            if isinstance(n, nodes.Or):
                a, b = ev(n.left), ev(n.right)
                return True if a or b else (False if a is False and b is False else None)
            if isinstance(n, nodes.Not):
                v = ev(n.node)
                return None if v is None else not v
            if isinstance(n, nodes.Compare) and len(n.ops) == 1 and self._is_role(n.expr):
                rhs, op = n.ops[0].expr, n.ops[0].op
                if isinstance(rhs, nodes.Const) and op in ("eq", "ne"):
                    return (rhs.value == role) == (op == "eq")
                if isinstance(rhs, nodes.List | nodes.Tuple) and all(isinstance(i, nodes.Const) for i in rhs.items):
                    inside = role in [getattr(i, "value", None) for i in rhs.items]
                    return inside if op == "in" else (not inside if op == "notin" else None)
            return None

        return ev(e)

    def assistant_only(self, toks: Sequence[Tok]) -> bool:
        return self.decide(toks) is True and all(self.decide(toks, r) is False for r in _OTHER_ROLES)

    def contains_stop(self, node: Node) -> bool:
        if isinstance(node, Data):
            return any(s in self.src.text[node.start : node.end] for s in self.stops)
        for tag in block_tags(node):
            for t in tag.toks:
                text = (
                    literal_of([t]) if t.kind == "string" else self.known.get(t.value, "") if t.kind == "name" else ""
                )
                if text and any(s in text for s in self.stops):
                    return True
        return False

    # -- insertion points ----------------------------------------------------------------------------------

    def _insert(self, pos: int, text: str) -> None:
        self.order += 1
        self.plan.inserts.append(Edit(pos, pos, text, self.order))

    def before(self, tag: Tag, keyword: str) -> None:
        self._insert(tag.start, block_tag(keyword, left_before(self.src, tag), ""))

    def after(self, tag: Tag, keyword: str) -> None:
        self._insert(tag.end, block_tag(keyword, "", right_after(self.src, tag)))

    def at_data(self, pos: int, keyword: str) -> None:
        left, right = in_data(self.src, pos)
        self._insert(pos, block_tag(keyword, left, right))

    def cut(self, tag: Tag, index: int, offset: int | None, keyword: str) -> None:
        self.order += 1
        self.plan.cuts.setdefault(tag.start, []).append(_Cut(index, offset, keyword, self.order))

    # -- the walk ------------------------------------------------------------------------------------------

    def where(self, pos: int) -> str:
        return f"line {self.src.line(pos)}"

    def seq(self, nodes: Sequence[Node], opener: Tag, state: _State, exclusive: bool) -> _State:
        """Walk one body; a block opened here is closed here (Jinja blocks nest)."""
        open_ = False
        last: Tag = opener
        for node in nodes:
            if state.phase == "done":
                break
            if isinstance(node, Data):
                state, open_ = self.data(node, state, open_, exclusive)
                continue
            if isinstance(node, Leaf):
                tag = node.tag
                if tag.kind == "var":
                    state, open_ = self.output(tag, state, open_, exclusive)
                elif tag.kind == "raw":
                    if state.phase == "header":
                        raise _Abort(f"{self.where(tag.start)}: a raw block inside the assistant header")
                    if not open_:
                        self.before(tag, "generation")
                        self.mark(exclusive)
                        open_ = True
                elif tag.keyword == "set":
                    self.track_set(tag)
                last = tag
                continue
            state, open_ = self.block(node, state, open_, exclusive)
            last = node.end_tag
        if open_:
            self.after(last, "endgeneration")
        return state

    def mark(self, exclusive: bool) -> None:
        if not exclusive:
            self.plan.shared = True

    def track_set(self, tag: Tag) -> None:
        toks = tag.expr
        if len(toks) >= 3 and toks[0].kind == "name" and toks[1].value == "=":
            value = literal_of(toks[2:])
            if value is not None:
                self.known[toks[0].value] = value
            else:
                self.known.pop(toks[0].value, None)

    def track_branch_sets(self, node: Block) -> None:
        """``{% if role == 'assistant' %}{% set role = 'model' %}{% else %}...``: follow the taken branch."""
        uncertain = False
        for br in node.branches:
            decided = self.decide(br.tag.expr) if br.tag.keyword != "else" else True
            if decided is False:
                continue
            sets = [n.tag for n in br.body if isinstance(n, Leaf) and n.tag.keyword == "set"]
            for tag in sets:
                if decided is True and not uncertain:
                    self.track_set(tag)
                elif tag.expr:
                    self.known.pop(tag.expr[0].value, None)
            if decided is True and not uncertain:
                return
            uncertain = True

    def data(self, node: Data, state: _State, open_: bool, exclusive: bool) -> tuple[_State, bool]:
        a, b = self.src.effective(node)
        text = self.src.text[a:b]
        if not text:
            return state, open_
        start = 0
        if state.phase == "header":
            if state.rem.startswith(text):
                state = _State("header", state.rem[len(text) :])
                if state.rem:
                    return state, open_
                start = len(text)
            elif text.startswith(state.rem):
                start = len(state.rem)
            else:
                raise _Abort(f"{self.where(a)}: the template text here does not continue the assistant header")
            state = _State("body")
            if start == len(text):
                return state, open_  # the block opens before whatever renders next
            self.at_data(a + start, "generation")
            self.mark(exclusive)
            open_ = True
        if not open_:
            self.at_data(a, "generation")
            self.mark(exclusive)
            open_ = True
        hit = self.first_stop(text, start)
        if hit is not None:
            nxt = self.src.next_tag(node.end) if a + hit == b < node.end else None
            if nxt is not None:
                self.before(nxt, "endgeneration")  # the stripped tail stays stripped by the next tag's rules
            else:
                self.at_data(a + hit, "endgeneration")
            self.plan.stop_found = True
            return _State("done"), False
        return state, open_

    def first_stop(self, text: str, start: int) -> int | None:
        """End of the first stop token in ``text[start:]``."""
        hits = [(text.find(s, start), s) for s in self.stops if text.find(s, start) >= 0]
        if not hits:
            return None
        pos, s = min(hits)
        return pos + len(s)

    def output(self, tag: Tag, state: _State, open_: bool, exclusive: bool) -> tuple[_State, bool]:
        if tag.expr and tag.expr[0].kind == "name" and tag.expr[0].value == "raise_exception":
            raise _Raises(f"{self.where(tag.start)}: raises")
        operands = chain_operands(tag.expr) or [list(tag.expr)]
        for i, op in enumerate(operands):
            if state.phase == "done":
                break
            value = self.value(op)
            consumed = 0
            if state.phase == "header":
                if value is None:
                    raise _Abort(
                        f"{self.where(tag.start)}: the assistant header is printed by "
                        f"`{self.src.span_text(op)}`, which cannot be evaluated without running the template"
                    )
                if state.rem.startswith(value) and len(value) < len(state.rem):
                    state = _State("header", state.rem[len(value) :])
                    continue
                if not value.startswith(state.rem):
                    raise _Abort(f"{self.where(tag.start)}: `{self.src.span_text(op)}` does not continue the header")
                consumed = len(state.rem)
                state = _State("body")
                if consumed == len(value):
                    self.cut(tag, i + 1, None, "generation")
                else:
                    if literal_of(op) is None:
                        raise _Abort(f"{self.where(tag.start)}: the header ends inside `{self.src.span_text(op)}`")
                    self.cut(tag, i, consumed, "generation")
                self.mark(exclusive)
                open_ = True
                if consumed == len(value):
                    continue
            if not open_:
                self.cut(tag, i, None, "generation")
                self.mark(exclusive)
                open_ = True
            if value is not None:
                hit = self.first_stop(value, consumed)
                if hit is not None:
                    if hit < len(value) and literal_of(op) is None:
                        raise _Abort(f"{self.where(tag.start)}: the stop token is inside `{self.src.span_text(op)}`")
                    self.cut(tag, i, hit, "endgeneration") if hit < len(value) else self.cut(
                        tag, i + 1, None, "endgeneration"
                    )
                    self.plan.stop_found = True
                    state, open_ = _State("done"), False
        return state, open_

    def block(self, node: Block, state: _State, open_: bool, exclusive: bool) -> tuple[_State, bool]:
        if node.keyword in ("macro", "set"):
            return state, open_  # definitions render nothing where they stand
        if node.keyword == "generation":
            raise _Abort(f"{self.where(node.first_tag.start)}: the template already has generation markers")
        renders = any(isinstance(n, Leaf) and n.tag.kind in ("var", "raw") for n in walk([node])) or any(
            isinstance(n, Data) and self.src.text[slice(*self.src.effective(n))] for n in walk([node])
        )
        if not renders:
            self.track_branch_sets(node)
            return state, open_
        if state.phase == "body" and not self.contains_stop(node):
            if not open_:
                self.before(node.first_tag, "generation")
                self.mark(exclusive)
                open_ = True
            return state, open_
        if node.keyword != "if":
            raise _Abort(
                f"{self.where(node.first_tag.start)}: the assistant "
                f"{'header' if state.phase == 'header' else 'stop token'} is rendered inside a `{node.keyword}` block"
            )
        if open_:
            self.before(node.first_tag, "endgeneration")
            open_ = False
        results: list[_State] = []
        certain = False
        for br in node.branches:
            decided = self.decide(br.tag.expr) if br.tag.keyword != "else" else True
            if decided is False:
                continue
            excl = exclusive or (br.tag.keyword != "else" and self.assistant_only(br.tag.expr))
            mark = (len(self.plan.inserts), {k: list(v) for k, v in self.plan.cuts.items()}, self.plan.shared)
            try:
                results.append(self.seq(br.body, br.tag, state, excl))
            except _Raises:
                # a branch that only raises renders nothing: drop whatever was planned inside it
                self.plan.inserts = self.plan.inserts[: mark[0]]
                self.plan.cuts, self.plan.shared = mark[1], mark[2]
            if decided is True and (br.tag.keyword == "else" or self.decide(br.tag.expr) is True):
                certain = True
                break
        if not certain and not (state.phase == "header" and state.rem == self.header and results):
            # No branch taken. Ignored when nothing of the turn has rendered yet: such a path renders no
            # assistant turn at all (the mask proof checks the turns that do render).
            results.append(state)
        if not results:
            raise _Raises(f"{self.where(node.first_tag.start)}: every branch raises")
        if len(set(results)) != 1:
            raise _Abort(
                f"{self.where(node.first_tag.start)}: the branches of this `if` end the assistant header or "
                "its stop token at different places"
            )
        return results[0], False


def _rewrite_output(src: Source, tag: Tag, cuts: list[_Cut]) -> str:
    """The variable tag split at ``cuts``: ``{{ a + 'x' }}{% generation %}{{ 'y' + b }}``.

    Printing the pieces of a ``+``/``~`` chain one after another renders the same text as printing the chain.
    """
    operands = chain_operands(tag.expr) or [list(tag.expr)]
    op = "+" if any(t.value == "+" for t in tag.expr if t.kind == "operator") else "~"
    # Pieces of each operand: its source text, or the parts of its literal cut at the requested offsets.
    offsets: dict[int, list[int]] = {}
    for c in cuts:
        if c.offset is not None:
            offsets.setdefault(c.index, []).append(c.offset)
    pieces: list[list[str]] = []
    for i, operand in enumerate(operands):
        lit = literal_of(operand)
        if i not in offsets or lit is None:
            pieces.append([src.span_text(operand)])
            continue
        string = next(t for t in operand if t.kind == "string")
        parts, raw, done = [], string.value, 0
        for off in sorted(set(offsets[i])):
            if 0 < off < len(lit):
                left, raw = split_literal(raw, off - done)
                parts.append(left)
                done = off
        pieces.append([*parts, raw])

    def position(c: _Cut) -> tuple[int, int]:
        """(operand, piece) before which the cut falls."""
        if c.offset is None:
            return (c.index, 0)
        lit = literal_of(operands[c.index]) or ""
        if c.offset <= 0:
            return (c.index, 0)
        if c.offset >= len(lit):
            return (c.index + 1, 0)
        return (c.index, sorted({o for o in offsets[c.index] if 0 < o < len(lit)}).index(c.offset) + 1)

    flat = [(i, j) for i, ps in enumerate(pieces) for j in range(len(ps))]
    items: list[tuple[str, str]] = []  # ("expr", text) | ("tag", keyword)
    group: list[str] = []
    ordered = sorted(cuts, key=lambda c: (position(c), c.order))
    k = 0
    for i, j in [*flat, (len(operands), 0)]:
        while k < len(ordered) and position(ordered[k]) <= (i, j):
            if group:
                items.append(("expr", f" {op} ".join(group)))
                group = []
            items.append(("tag", ordered[k].keyword))
            k += 1
        if i < len(operands):
            group.append(pieces[i][j])
    if group:
        items.append(("expr", f" {op} ".join(group)))
    out = []
    for n, (kind, text) in enumerate(items):
        if kind == "expr":
            out.append("{{" + tag.left + " " + text + " " + tag.right + "}}")
        elif n == 0:
            out.append(block_tag(text, left_before(src, tag), ""))
        elif n == len(items) - 1:
            out.append(block_tag(text, "", right_after(src, tag)))
        else:
            out.append(block_tag(text))
    return "".join(out)


def _loop_and_known(fx: FixContext, src: Source) -> tuple[Block, dict[str, str]]:
    loops = rendering_loops(src)
    if not loops:
        raise PatchError("no loop over the messages renders anything")
    loop = max(loops, key=lambda b: sum(1 for n in walk([b]) if isinstance(n, Leaf) and n.tag.kind == "var"))
    tok = fx.model.tokenizer
    known = {k: v for k, v in (tok.special_tokens_map or {}).items() if isinstance(v, str)}
    return loop, known


def plan_markers(fx: FixContext, src: Source) -> tuple[list[Edit], list[str], list[str]]:
    """Edits placing generation markers, one line per change, and caveats."""
    header = header_text(fx, src.text)
    loop, known = _loop_and_known(fx, src)
    planner = _Planner(src, loop, header, fx.stop_texts, known)
    body = loop.branches[0]
    try:
        state = planner.seq(body.body, body.tag, _State("header", header) if header else _State("body"), False)
    except _Abort as exc:
        raise PatchError(str(exc)) from exc
    if state.phase == "header":
        raise PatchError("the loop body never finishes rendering the assistant header")
    plan = planner.plan
    edits = list(plan.inserts)
    for start, cuts in plan.cuts.items():
        tag = next(t for t in src.tags if t.start == start)
        edits.append(Edit(tag.start, tag.end, _rewrite_output(src, tag, cuts)))
    changes = [f"assistant output starts after the header {header!r}"]
    caveats: list[str] = []
    if not plan.stop_found:
        caveats.append("the template renders no stop token inside the assistant turn: the mask cannot include one")
    else:
        changes.append(f"generation ends after the stop token {' / '.join(repr(s) for s in planner.stops)}")
    if plan.shared:
        edits = [_specialise(src, loop, edits)]
        changes.append(
            f"line {src.line(loop.first_tag.start)}: the loop body runs for every role, so an assistant-only copy "
            "carries the markers"
        )
    return edits, changes, caveats


def _role_expr(src: Source, loop: Block) -> str:
    names = loop_target(loop)
    if not names:
        raise PatchError("the message loop has no loop variable")
    name = names[0]
    return f"{name}['role']" if f"{name}['role']" in src.text and f"{name}.role" not in src.text else f"{name}.role"


def _specialise(src: Source, loop: Block, edits: list[Edit]) -> Edit:
    """``{% if <message>.role == 'assistant' %}<body with markers>{% else %}<body>{% endif %}``."""
    opener = loop.branches[0].tag
    closer = loop.branches[1].tag if len(loop.branches) > 1 else loop.end_tag
    a, b = opener.end, closer.start
    inner = [Edit(e.start - a, e.end - a, e.text, e.order) for e in edits if a <= e.start and e.end <= b]
    if len(inner) != len(edits):
        raise PatchError("markers would fall outside the message loop")
    body = src.text[a:b]
    marked = apply_edits(body, inner)
    right = opener.right
    left = closer.left
    return Edit(
        a,
        b,
        block_tag(f"if {_role_expr(src, loop)} == 'assistant'", "", right)
        + marked
        + block_tag("else", left, right)
        + body
        + block_tag("endif", left, ""),
    )


def strip_markers(src: Source) -> str:
    """The template without its generation tags (whitespace control kept with an empty comment if needed)."""
    edits = []
    for tag in src.tags:
        if tag.kind == "block" and tag.keyword in ("generation", "endgeneration"):
            before, after = src.text[: tag.start], src.text[tag.end :]
            line = before.rsplit("\n", 1)[-1]
            neutral = (
                (tag.left != "-" or not before[-1:].isspace())
                and (tag.left != "" or not line or line.strip(" \t") != "")  # lstrip_blocks has nothing to eat
                and (tag.right != "-" or not after[:1].isspace())
                and (tag.right != "" or not after.startswith("\n"))  # trim_blocks has nothing to eat
            )
            edits.append(Edit(tag.start, tag.end, "" if neutral else "{#" + tag.left + " " + tag.right + "#}"))
    return apply_edits(src.text, edits)


def propose(fx: FixContext, src: Source) -> Patch | Skip:
    check = next((c for c in fx.report.checks if c.id == "loss_mask"), None)
    if check is None or not check.active_findings:
        return Skip(ID_MARKERS, "generation markers are present and keep the stop token in the mask")
    stop_outside = any(f.cls == "stop_seam" for f in check.active_findings)
    patch_id = ID_STOP if stop_outside else ID_MARKERS
    try:
        base = Source(strip_markers(src)) if stop_outside else src
        edits, changes, caveats = plan_markers(fx, base)
    except PatchError as exc:
        return Skip(patch_id, f"cannot place generation markers: {exc}")
    if stop_outside:
        changes.insert(0, "existing {% generation %} markers removed (they left the stop token outside)")
    return Patch(
        id=patch_id,
        title="move the stop token into the generation markers"
        if stop_outside
        else "add {% generation %} markers around the assistant output",
        why=f"loss_mask: {check.summary}",
        template=apply_edits(base.text, edits),
        changes=changes,
        targets=("loss_mask",),
        required=False,
        caveats=caveats,
    )
