"""Compare two gradients of one model while holding only one of them.

``hold_gradient`` runs a gradient pass and moves the result out of ``.grad`` (no copy). ``compare_with`` runs a
second pass and compares it with the held gradient parameter by parameter *as its last backward produces it*
(``register_post_accumulate_grad_hook``): each parameter's new gradient is reduced to four float64 sums and
dropped at once. Peak memory is the held gradient, plus the second gradient's accumulation when the second pass
needs more than one backward (micro-batches); two full gradient copies never coexist with a third.

A *gradient pass* is any callable ``run(before_last)`` that accumulates a gradient into ``.grad`` with one or more
``backward()`` calls and calls ``before_last()`` right before its last one (``gradients.surrogate_pass`` builds
one from training views). The sums run on the parameter's device in chunks, so that no float64 copy of a large
parameter (a 150k-row embedding) is made whole; only scalars reach the host.

Used by ``tito-audit rl`` (B against R, the noise floor, the low-probability studies) and meant for any other
B/R gradient comparison.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

GradientPass = Callable[[Callable[[], None] | None], None]
CHUNK_ELEMENTS = 1 << 22  # float64 temporaries of 32 MB per operand


@dataclass
class GradientComparison:
    """Float64 sums over every parameter: ||a||, ||b||, <a, b>, ||b - a|| and whether every element is equal."""

    norm_a: float = 0.0
    norm_b: float = 0.0
    dot: float = 0.0
    diff_norm: float = 0.0
    bitwise_equal: bool = True
    parameters: int = 0
    parts: list[Any] = field(default_factory=list, repr=False)  # per parameter: its sums (aa, bb, ab, dd, equal)

    @property
    def compared(self) -> bool:
        """False when the first gradient is zero: nothing was compared (never "identical")."""
        return self.norm_a > 0.0

    @property
    def cosine(self) -> float | None:
        if not self.compared:
            return None
        if self.bitwise_equal:
            return 1.0
        return self.dot / (self.norm_a * self.norm_b) if self.norm_b > 0 else 0.0

    @property
    def rel_error(self) -> float | None:
        """||b - a|| / ||a||; None when a is zero."""
        if not self.compared:
            return None
        return 0.0 if self.bitwise_equal else self.diff_norm / self.norm_a

    def to_dict(self, first: str = "b", second: str = "r") -> dict[str, Any]:
        return {
            "cosine": self.cosine,
            "rel_error": self.rel_error,
            f"norm_{first}": self.norm_a,
            f"norm_{second}": self.norm_b,
            "bitwise_equal": self.bitwise_equal if self.compared else None,
        }


@dataclass
class _Sums:
    aa: float = 0.0
    bb: float = 0.0
    ab: float = 0.0
    dd: float = 0.0
    equal: bool = True


def pair_sums(a: torch.Tensor | None, b: torch.Tensor | None) -> _Sums:
    """The four float64 sums of one parameter's two gradients (None = zero), in chunks."""
    s = _Sums()
    if a is None and b is None:
        return s
    ref = a if a is not None else b
    assert ref is not None
    fa = a.reshape(-1) if a is not None else None
    fb = b.reshape(-1) if b is not None else None
    s.equal = (
        torch.equal(a, b)
        if a is not None and b is not None
        else not bool((ref != 0).any())  # a missing gradient equals an all-zero one
    )
    n = ref.numel()
    for i in range(0, n, CHUNK_ELEMENTS):
        xa = fa[i : i + CHUNK_ELEMENTS].to(torch.float64, copy=True) if fa is not None else None
        xb = fb[i : i + CHUNK_ELEMENTS].to(torch.float64, copy=True) if fb is not None else None
        if xa is not None:
            s.aa += float(xa.dot(xa))
        if xb is not None:
            s.bb += float(xb.dot(xb))
        if xa is not None and xb is not None:
            s.ab += float(xa.dot(xb))
            s.dd += float(xb.sub_(xa).square_().sum())  # in place: two float64 chunks at most
        else:
            s.dd += float((xa if xa is not None else xb).square().sum())  # type: ignore[union-attr]
    return s


def _total(sums: Sequence[_Sums]) -> GradientComparison:
    return GradientComparison(
        norm_a=sum(s.aa for s in sums) ** 0.5,
        norm_b=sum(s.bb for s in sums) ** 0.5,
        dot=sum(s.ab for s in sums),
        diff_norm=sum(s.dd for s in sums) ** 0.5,
        bitwise_equal=all(s.equal for s in sums),
        parameters=len(sums),
        parts=list(sums),
    )


def compare(a: Sequence[torch.Tensor | None], b: Sequence[torch.Tensor | None]) -> GradientComparison:
    """Two gradients held in full (one tensor per parameter)."""
    return _total([pair_sums(x, y) for x, y in zip(a, b, strict=True)])


@dataclass
class HeldGradient:
    """A gradient moved out of ``.grad``: one tensor (or None) per parameter of ``params``."""

    params: list[torch.Tensor]
    grads: list[torch.Tensor | None] = field(default_factory=list)

    def norm(self) -> float:
        return sum(pair_sums(g, None).aa for g in self.grads) ** 0.5

    def restore(self) -> None:
        """Put the gradient back into ``.grad`` (for an optimiser step) and let go of it."""
        for p, g in zip(self.params, self.grads, strict=True):
            p.grad = g
        self.grads = [None] * len(self.params)

    def release(self) -> None:
        self.grads = [None] * len(self.params)


def trainable(model: Any) -> list[torch.Tensor]:
    return [p for p in model.parameters() if p.requires_grad]


def clear_grads(params: Sequence[torch.Tensor]) -> None:
    for p in params:
        p.grad = None


def hold_gradient(params: Sequence[torch.Tensor], run: GradientPass) -> HeldGradient:
    """Run a gradient pass from zero and take its result out of ``.grad`` (no copy)."""
    params = list(params)
    clear_grads(params)
    run(None)
    held = HeldGradient(params, [p.grad for p in params])
    clear_grads(params)
    return held


def compare_with(
    held: HeldGradient,
    run: GradientPass,
    *,
    release: bool = True,
    on_parameter: Callable[[int, torch.Tensor, torch.Tensor | None], None] | None = None,
) -> GradientComparison:
    """Run a gradient pass from zero and compare it with ``held``, parameter by parameter as it is produced.

    Each parameter's new gradient is dropped once compared (``.grad`` is None afterwards). ``release`` also drops
    the held tensor of that parameter (keep it with ``release=False`` to compare it again). ``on_parameter(i, p,
    grad)`` sees each final gradient before it is dropped (an in-place update, a running sum).
    """
    params = held.params
    clear_grads(params)
    sums: list[_Sums | None] = [None] * len(params)
    handles: list[Any] = []

    def finish(i: int, p: torch.Tensor) -> None:
        if sums[i] is not None:
            raise RuntimeError("a gradient pass ran more than one backward after before_last()")
        grad = p.grad
        sums[i] = pair_sums(held.grads[i], grad)
        if on_parameter is not None:
            on_parameter(i, p, grad)
        p.grad = None
        if release:
            held.grads[i] = None

    def install() -> None:
        for i, p in enumerate(params):
            handles.append(p.register_post_accumulate_grad_hook(lambda p, i=i: finish(i, p)))

    try:
        run(install)
    finally:
        for h in handles:
            h.remove()
    for i, p in enumerate(params):  # parameters the last backward did not reach (or a pass without backward)
        if sums[i] is None:
            finish(i, p)
    return _total([s for s in sums if s is not None])


@torch.no_grad()
def add_to_parameters(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor | None], scale: float) -> None:
    """theta += scale * g in place (a plain gradient step when scale < 0): studies move the policy and move it
    back instead of copying it. Moving back is exact up to one rounding per element."""
    for p, g in zip(params, grads, strict=True):
        if g is not None:
            p.add_(g.to(p.dtype), alpha=scale)
