"""Where the ``{% generation %}`` tags go: a walk of the message loop as it runs for an assistant message.

The walk consumes the assistant header (what the generation prompt and the rendered turn share) from the
statically known pieces, opens the block where the header ends and closes it just after the stop token,
splitting an output or a literal when a place lies inside one. It only plans: the edits are applied by
``markers``. A path it cannot follow without running the template aborts the plan with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tito_audit.fix.assistant_view import AssistantView
from tito_audit.fix.output_split import Cut
from tito_audit.rendering.template_source import (
    Block,
    Data,
    Edit,
    Leaf,
    Node,
    PatchError,
    Source,
    Tag,
    block_tag,
    chain_operands,
    in_data,
    left_before,
    literal_of,
    right_after,
    walk,
)


@dataclass(frozen=True)
class _State:
    phase: str  # "header": still inside the generation prompt | "body": sampled text | "done": past the stop
    rem: str = ""  # header text not yet rendered


class _Abort(Exception):
    pass


class _Raises(_Abort):
    """This path calls ``raise_exception``: no conversation renders through it."""


@dataclass
class _Plan:
    """The edits the walk chose: tags inserted between template pieces, and tags that split an output."""

    inserts: list[Edit] = field(default_factory=list)
    cuts: dict[int, list[Cut]] = field(default_factory=dict)  # var tag start -> cuts
    shared: bool = False  # some marker lies in code that other roles run too
    stop_found: bool = False
    stops: list[str] = field(default_factory=list)  # the stop texts the walk looked for


class _Planner:
    """The walk itself; every tag it places gets the next ``order`` so that edits at one place keep theirs."""

    def __init__(self, src: Source, view: AssistantView, header: str) -> None:
        self.src = src
        self.view = view
        self.header = header
        self.plan = _Plan(stops=view.stops)
        self.order = 0

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
        self.plan.cuts.setdefault(tag.start, []).append(Cut(index, offset, keyword, self.order))

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
                    self.view.track_set(tag)
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
        hits = [(text.find(s, start), s) for s in self.view.stops if text.find(s, start) >= 0]
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
            value = self.view.value(op)
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
        if not self.renders(node):
            self.view.track_branch_sets(node)
            return state, open_
        if state.phase == "body" and not self.view.contains_stop(node):
            if not open_:
                self.before(node.first_tag, "generation")
                self.mark(exclusive)
            return state, True
        if node.keyword != "if":
            raise _Abort(
                f"{self.where(node.first_tag.start)}: the assistant "
                f"{'header' if state.phase == 'header' else 'stop token'} is rendered inside a `{node.keyword}` block"
            )
        if open_:
            self.before(node.first_tag, "endgeneration")
        results = self.branch_states(node, state, exclusive)
        if not results:
            raise _Raises(f"{self.where(node.first_tag.start)}: every branch raises")
        if len(set(results)) != 1:
            raise _Abort(
                f"{self.where(node.first_tag.start)}: the branches of this `if` end the assistant header or "
                "its stop token at different places"
            )
        return results[0], False

    def renders(self, node: Block) -> bool:
        """The block writes output: an expression, raw text, or data that is not stripped away."""
        return any(isinstance(n, Leaf) and n.tag.kind in ("var", "raw") for n in walk([node])) or any(
            isinstance(n, Data) and self.src.text[slice(*self.src.effective(n))] for n in walk([node])
        )

    def branch_states(self, node: Block, state: _State, exclusive: bool) -> list[_State]:
        """The state after each branch of an ``if`` that may be taken (up to the first one certain to be), and
        ``state`` itself when no branch may be taken, except where nothing of the turn has rendered yet: such a path
        renders no assistant turn at all (the mask proof checks the turns that do render)."""
        results: list[_State] = []
        certain = False
        for br in node.branches:
            decided = self.view.decide(br.tag.expr) if br.tag.keyword != "else" else True
            if decided is False:
                continue
            excl = exclusive or (br.tag.keyword != "else" and self.view.assistant_only(br.tag.expr))
            after = self.branch(br.body, br.tag, state, excl)
            if after is not None:
                results.append(after)
            if decided is True and (br.tag.keyword == "else" or self.view.decide(br.tag.expr) is True):
                certain = True
                break
        if not certain and not (state.phase == "header" and state.rem == self.header and results):
            results.append(state)
        return results

    def branch(self, body: Sequence[Node], tag: Tag, state: _State, exclusive: bool) -> _State | None:
        """The state after one branch, or None for a branch that only raises: it renders nothing, and whatever was
        planned inside it is dropped."""
        mark = (len(self.plan.inserts), {k: list(v) for k, v in self.plan.cuts.items()}, self.plan.shared)
        try:
            return self.seq(body, tag, state, exclusive)
        except _Raises:
            self.plan.inserts = self.plan.inserts[: mark[0]]
            self.plan.cuts, self.plan.shared = mark[1], mark[2]
            return None


def plan_loop(src: Source, loop: Block, header: str, stops: Sequence[str], known: dict[str, str]) -> _Plan:
    """The marker edits for the message loop ``loop``: inserted tags, and cuts inside outputs by tag start."""
    planner = _Planner(src, AssistantView(src, loop, stops, known), header)
    body = loop.branches[0]
    try:
        state = planner.seq(body.body, body.tag, _State("header", header) if header else _State("body"), False)
    except _Abort as exc:
        raise PatchError(str(exc)) from exc
    if state.phase == "header":
        raise PatchError("the loop body never finishes rendering the assistant header")
    return planner.plan
