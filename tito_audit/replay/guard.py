"""The run-time guard: is this batch trained on exactly what was sampled? Cheap enough for every batch.

    from tito_audit import check_batch
    check_batch([{"sampled": [turn0_ids, turn1_ids], "input_ids": ids, "loss_mask": mask}, ...])

For each episode, every sampled turn must sit in ``input_ids`` verbatim with ``loss_mask`` 1 on exactly its ids
(and 0 everywhere else). No renders and no tokenizer: a slice comparison per turn when the batch is right, an
alignment only for an episode that is not. Pass ``tokenizer=`` to name divergences by class (decodes a few
ids, still no render), or ``renderer=`` with ``messages`` in the items to also rebuild the reference buffer
(renders: for debugging, not for every batch).

``on_fail``: ``"raise"`` (``TitoGuardError`` with the first divergence), ``"log"`` (one warning per failing
episode on ``logger``), or ``"return"`` (just the ``GuardResult``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tito_audit.replay.compare import against_sampled
from tito_audit.replay.divergence import Divergence

OnFail = Literal["raise", "log", "return"]
_LOG = logging.getLogger("tito_audit.guard")


@dataclass
class GuardFailure:
    episode: int  # index in the batch
    divergence: Divergence
    trained_not_sampled: int
    sampled_not_trained: int
    mask_flips: int

    def __str__(self) -> str:
        d = self.divergence
        where = f"token {d.index}" if d.index is not None else "shape"
        return (
            f"episode {self.episode}, turn {d.turn}, {where} ({d.cls}): {d.message}; trained never sampled "
            f"{self.trained_not_sampled}, sampled not trained {self.sampled_not_trained}, mask flips {self.mask_flips}"
        )


@dataclass
class GuardResult:
    episodes: int = 0
    failures: list[GuardFailure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def __bool__(self) -> bool:
        return self.ok

    @property
    def first(self) -> GuardFailure | None:
        return self.failures[0] if self.failures else None


class TitoGuardError(AssertionError):
    """A batch trains on tokens that were not sampled (or drops sampled ones); ``result`` has every failure."""

    def __init__(self, result: GuardResult) -> None:
        n = len(result.failures)
        super().__init__(f"TITO guard: {n} of {result.episodes} episode(s) diverge; first: {result.first}")
        self.result = result


def _ints(x: Any) -> list[int]:
    if hasattr(x, "tolist"):
        x = x.tolist()
    return [int(v) for v in x] if not isinstance(x, list) or (x and not isinstance(x[0], int)) else x


def _item(item: Any) -> tuple[list[list[int]], list[list[float] | None], list[int], list[int] | None]:
    """(sampled turns, their logprobs, input_ids, loss_mask) from a mapping, a Trajectory, or a replay Episode."""
    if hasattr(item, "sampled_spans") and hasattr(item, "loss_mask"):  # tito_audit.Trajectory
        ids = list(item.input_ids)
        return [ids[a:b] for a, b in item.sampled_spans()], [], ids, list(item.loss_mask)
    if hasattr(item, "turns") and hasattr(item, "input_ids") and not isinstance(item, Mapping):  # Episode
        return [t.ids for t in item.turns], [t.logprobs for t in item.turns], item.input_ids, item.loss_mask
    if not isinstance(item, Mapping):
        raise TypeError(f"a batch item is a mapping, a Trajectory or an Episode, not {type(item).__name__}")
    turns_raw = item.get("sampled", item.get("turns"))
    if turns_raw is None or "input_ids" not in item:
        raise KeyError("a batch item needs 'sampled' (per-turn sampled ids) and 'input_ids'")
    turns: list[list[int]] = []
    lps: list[list[float] | None] = []
    for t in turns_raw:
        if isinstance(t, Mapping):
            turns.append(_ints(t["ids"]))
            lps.append(t.get("logprobs"))
        else:
            turns.append(_ints(t))
            lps.append(None)
    ids = _ints(item["input_ids"])
    mask_raw = item.get("loss_mask", item.get("mask"))
    mask = _ints(mask_raw) if mask_raw is not None else None
    attention = item.get("attention_mask")
    if attention is not None:  # padded tensors: keep the real positions
        keep = [i for i, a in enumerate(_ints(attention)) if a]
        ids = [ids[i] for i in keep]
        mask = [mask[i] for i in keep] if mask is not None else None
    return turns, lps, ids, mask


def _rows(batch: Any) -> list[Any]:
    """A list of items, or one mapping of columns (``{"sampled": [...], "input_ids": [...], ...}``)."""
    if isinstance(batch, Mapping):
        cols = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in batch.items()}
        n = len(cols.get("input_ids", []))
        return [{k: v[i] for k, v in cols.items()} for i in range(n)]
    return list(batch)


def check_batch(
    batch: Any,
    *,
    on_fail: OnFail = "raise",
    tokenizer: Any = None,
    stop_ids: Sequence[int] = (),
    logger: logging.Logger | None = None,
    renderer: Any = None,
) -> GuardResult:
    """Check one training batch; see the module docstring. Returns the ``GuardResult`` unless it raises."""
    if on_fail not in ("raise", "log", "return"):
        raise ValueError(f"on_fail must be 'raise', 'log' or 'return', not {on_fail!r}")
    decode = None
    specials: list[int] = []
    bos = None
    if tokenizer is not None:
        decode = lambda ids: tokenizer.decode(list(ids), skip_special_tokens=False)  # noqa: E731
        specials = list(getattr(tokenizer, "all_special_ids", []) or [])
        bos = getattr(tokenizer, "bos_token_id", None)
        if not stop_ids and getattr(tokenizer, "eos_token_id", None) is not None:
            stop_ids = [tokenizer.eos_token_id]
    result = GuardResult()
    for n, item in enumerate(_rows(batch)):
        result.episodes += 1
        if renderer is not None and isinstance(item, Mapping) and item.get("messages") is not None:
            failure = _with_renders(n, item, renderer)
            if failure is not None:
                result.failures.append(failure)
            continue
        turns, lps, ids, mask = _item(item)
        if mask is not None and len(mask) != len(ids):
            d = Divergence(-1, None, "template", "shape", f"loss_mask has {len(mask)} values for {len(ids)} input_ids")
            result.failures.append(GuardFailure(n, d, 0, 0, 0))
            continue
        cmp = against_sampled(turns, lps, ids, mask, decode=decode, stop_ids=stop_ids, special_ids=specials, bos_id=bos)
        if not cmp.ok:
            result.failures.append(
                GuardFailure(n, cmp.divergences[0], cmp.trained_not_sampled, cmp.sampled_not_trained, cmp.mask_flips)
            )
    if result.failures:
        if on_fail == "raise":
            raise TitoGuardError(result)
        if on_fail == "log":
            log = logger or _LOG
            for f in result.failures:
                log.warning("TITO guard: %s", f)
    return result


def _with_renders(n: int, item: Mapping[str, Any], renderer: Any) -> GuardFailure | None:
    """Full replay of one item against the rebuilt buffer (renders; asked for with ``renderer=``)."""
    from tito_audit.replay.analyze import ReplayContext, analyze
    from tito_audit.replay.schema import episode_from_native
    from tito_audit.rollout.stop import stop_token_ids

    native = dict(item)
    native.setdefault("turns", native.pop("sampled", None))
    ep = episode_from_native(native, n)
    tok = renderer.tokenizer
    ctx = ReplayContext(
        renderer, list(stop_token_ids(tok, renderer)), list(tok.all_special_ids or []), tok.bos_token_id, False
    )
    res = analyze(ep, ctx)
    if not res.divergences and not res.shape:
        return None
    d = res.divergences[0] if res.divergences else Divergence(-1, None, "template", "shape", "; ".join(res.shape))
    return GuardFailure(n, d, res.trained_not_sampled, res.sampled_not_trained, res.mask_flips)
