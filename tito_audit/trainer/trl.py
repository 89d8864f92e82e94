"""Guard and log TRL's ``GRPOTrainer``: ``check_batch`` on every training batch before the loss, and one native
replay record per episode, with the ids and mask the loss uses.

    from trl import GRPOTrainer
    from tito_audit.trainer.trl import TitoGuardMixin

    class GuardedGRPOTrainer(TitoGuardMixin, GRPOTrainer): ...
    trainer = GuardedGRPOTrainer(model, reward_funcs, args=args, train_dataset=ds, rollout_func=rollout,
                                 tito_log="rollouts.jsonl.gz")

Only the rollout knows what the engine sampled turn by turn: TRL's ``rollout_func`` returns each episode flattened
(``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask``). It adds one field, ``"tito_episode"``: per
episode a dict in the native record's layout with ``turns`` (per assistant turn ``{"ids", "logprobs"?,
"prompt_ids"?}``, as the engine returned them) and, so that ``tito-audit replay`` can also rebuild the buffer and
the naive what-if, ``messages``, ``tools``, ``chat_template_kwargs`` and ``id``. TRL passes extra rollout fields to
the reward functions (which take ``**kwargs``) and leaves them on the batch's input rows, where the mixin reads them.

Where it hooks (TRL 1.16, ``trl/trainer/grpo_trainer.py``): ``_generate_and_score_completions``, the one method
that holds the whole generated batch with its rows in rollout order, turns the rollout into the tensors the loss
reads (``prompt_ids``/``prompt_mask`` left-padded, ``completion_ids``/``completion_mask``, ``tool_mask``); the mixin
writes the records there and attaches each episode's sampled turns to its row, so they travel with it through
TRL's shuffle and split into steps. ``compute_loss`` (public ``Trainer`` API) then checks the step's rows:
trained ids = prompt + completion under the attention masks, loss mask = 0 on the prompt and
``completion_mask * tool_mask`` on the completion, exactly what ``GRPOTrainer._compute_loss`` weighs. Where the
rollout's turns carry ``prompt_ids`` (the context the engine was given), the guard also checks that each turn was
trained after exactly that context; without them it says "context not checked".

Two more things TRL does with a batch are checked or accounted for:
- the flattened ``logprobs`` the rollout returns become ``sampling_per_token_logps`` (importance sampling, the
  off-policy mask); on the trained (sampled) positions they must equal the per-turn log-probs the rollout logs;
- ``mask_truncated_completions=True`` zeroes every mask of a completion that did not end in EOS: such a row trains
  nothing, on purpose. It is not a divergence; it is counted (``tito_masked``), said once in the log, noted in the
  step's ``GuardResult.not_checked``, and not written to the log (replay checks what was trained).

With several processes (ranks), a ``tito_log`` path becomes one file per rank (``rollouts.rank1.jsonl.gz``,
``tito_audit.replay.per_rank_path``): two writers on one name would refuse each other.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tito_audit.replay.divergence import Divergence
from tito_audit.replay.schema import RecordError
from tito_audit.trainer.guard import GuardFailure, GuardResult, OnFail, TitoGuardError, check_batch
from tito_audit.trainer.tokenizer_reading import tokenizer_stops
from tito_audit.trainer.writer import LogWriter, per_rank_path

EPISODE_FIELD = "tito_episode"  # the rollout's extra field, and the batch key the mixin attaches to each row
_LOG = logging.getLogger("tito_audit.guard")

if TYPE_CHECKING:
    _TrainerBase = Any  # the mixin sits before a TRL trainer class in the MRO
else:
    _TrainerBase = object


def trained_rows(batch: Mapping[str, Any]) -> list[tuple[list[int], list[int]]]:
    """Per row of a GRPO batch, (trained ids, loss mask) without padding, as ``GRPOTrainer._compute_loss`` sees them."""
    prompt_ids, prompt_mask = batch["prompt_ids"].tolist(), batch["prompt_mask"].tolist()
    completion_ids, completion_mask = batch["completion_ids"].tolist(), batch["completion_mask"].tolist()
    tool = batch.get("tool_mask")
    tool_mask = tool.tolist() if tool is not None else [[1] * len(row) for row in completion_mask]
    rows = []
    for p, pm, c, cm, tm in zip(prompt_ids, prompt_mask, completion_ids, completion_mask, tool_mask, strict=True):
        ids = [t for t, m in zip(p, pm, strict=True) if m]
        mask = [0] * len(ids)
        for t, m, w in zip(c, cm, tm, strict=True):
            if m:
                ids.append(t)
                mask.append(1 if w else 0)
        rows.append((ids, mask))
    return rows


def trained_logprobs(batch: Mapping[str, Any]) -> list[list[float]] | None:
    """Per row, TRL's ``sampling_per_token_logps`` (the rollout's flattened ``logprobs``) on the positions the loss
    trains (``completion_mask * tool_mask``), in order; None when the batch has none."""
    sampled = batch.get("sampling_per_token_logps")
    if sampled is None:
        return None
    completion_mask = batch["completion_mask"].tolist()
    tool = batch.get("tool_mask")
    tool_mask = tool.tolist() if tool is not None else [[1] * len(row) for row in completion_mask]
    return [
        [lp for lp, m, w in zip(row, cm, tm, strict=True) if m and w]
        for row, cm, tm in zip(sampled.tolist(), completion_mask, tool_mask, strict=True)
    ]


def _logprob_divergence(
    turns: Sequence[Mapping[str, Any]], given: list[float], ids: list[int], mask: list[int]
) -> tuple[bool, Divergence | None]:
    """(compared, the first trained position where TRL's flattened log-prob differs from the turn's own). Not
    compared when a turn carries no log-probs, or not one per sampled id."""
    own: list[tuple[int, float]] = []
    for k, t in enumerate(turns):
        lps = t.get("logprobs")
        if lps is None:
            return False, None
        lps = lps.tolist() if hasattr(lps, "tolist") else lps
        if len(lps) != len(t["ids"]):
            return False, None
        own += [(k, float(v)) for v in lps]
    trained = [i for i, m in enumerate(mask) if m]
    if len(own) != len(given) or len(trained) != len(given):
        return False, None  # not reached when the guard passed: the trained positions are the sampled ids
    for j, ((k, mine), theirs) in enumerate(zip(own, given, strict=True)):
        if math.isnan(mine) or math.isnan(theirs) or math.isclose(mine, theirs, rel_tol=1e-5, abs_tol=1e-5):
            continue
        at = trained[j]
        message = (
            f"the rollout's flattened logprobs (TRL's sampling_per_token_logps: importance sampling, off-policy "
            f"mask) give {theirs:.5f} to sampled id {ids[at]} where turn {k}'s own logprobs give {mine:.5f}: "
            "the flattened logprobs are not aligned with the completion"
        )
        return True, Divergence(k, at, "template", "logprobs", message)
    return True, None


class TitoGuardMixin(_TrainerBase):
    """Put it before ``GRPOTrainer`` in a subclass; see the module docstring.

    ``tito_log``: a path (``.jsonl``, ``.jsonl.gz``, ``.parquet``) or a ``LogWriter``; None writes nothing.
    ``tito_on_fail``: ``"raise"`` (``TitoGuardError`` before the loss, the failing episode ids in its notes),
    ``"log"`` (a warning per failing episode), ``"return"`` (only ``tito_failures``). ``tito_classes``: name each
    divergence by class (decodes a few ids of a failing episode with the trainer's tokenizer; no render).
    After a run, ``tito_checked`` counts the episodes checked, ``tito_failures`` holds (episode id, failure),
    ``tito_logprobs_checked`` counts the episodes whose flattened log-probs were compared with their turns', and
    ``tito_masked`` holds the ids of episodes ``mask_truncated_completions`` left untrained.
    """

    def __init__(
        self,
        *args: Any,
        tito_log: str | os.PathLike[str] | LogWriter | None = None,
        tito_on_fail: OnFail = "raise",
        tito_classes: bool = True,
        **kwargs: Any,
    ) -> None:
        if tito_on_fail not in ("raise", "log", "return"):
            raise ValueError(f"tito_on_fail must be 'raise', 'log' or 'return', not {tito_on_fail!r}")
        super().__init__(*args, **kwargs)
        self.tito_on_fail: OnFail = tito_on_fail
        self.tito_classes = tito_classes
        self.tito_log = tito_log
        self.tito_checked = 0
        self.tito_failures: list[tuple[str, GuardFailure]] = []
        self.tito_masked: list[str] = []
        self.tito_logprobs_checked = 0
        self._tito_said: set[str] = set()
        self._tito_writer: LogWriter | None = tito_log if isinstance(tito_log, LogWriter) else None
        self._tito_episodes = 0

    # -- the log, written where the batch is built -------------------------------------------------------------

    def _writer(self) -> LogWriter | None:
        if self._tito_writer is None and self.tito_log is not None:
            accelerator = getattr(self, "accelerator", None)
            path = per_rank_path(  # one file per rank: ranks given one name would refuse each other
                self.tito_log,  # type: ignore[arg-type]
                getattr(accelerator, "process_index", None),
                getattr(accelerator, "num_processes", None),
            )
            self._tito_writer = LogWriter(path)
        return self._tito_writer

    def _masked_whole(self, batch: Mapping[str, Any]) -> list[bool]:
        """Rows ``mask_truncated_completions`` zeroed (a completion that did not end in EOS): TRL trains nothing of
        them on purpose. Only that option zeroes a whole row's ``completion_mask`` (a completion is never empty)."""
        if not getattr(self, "mask_truncated_completions", False):
            return [False] * len(batch["completion_mask"])
        return [not any(row) for row in batch["completion_mask"].tolist()]

    def _generate_and_score_completions(self, inputs: Sequence[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        episodes = [row.get(EPISODE_FIELD) for row in inputs]
        missing = sum(ep is None for ep in episodes)
        if missing:
            raise ValueError(
                f"TitoGuardMixin: {missing} of {len(episodes)} rollout(s) carry no {EPISODE_FIELD!r}: return it from "
                "rollout_func, per episode {'turns': [{'ids': ..., 'logprobs': ...}, ...], 'messages': ..., "
                "'tools': ...} (docs/integrations.md)"
            )
        mode = "train" if self.model.training else "eval"
        writer = self._writer()
        attached = []
        masked = self._masked_whole(output)
        for ep, (ids, mask), untrained in zip(episodes, trained_rows(output), masked, strict=True):
            if not isinstance(ep, Mapping) or "turns" not in ep:
                raise ValueError(f"TitoGuardMixin: {EPISODE_FIELD!r} must be a dict with 'turns', not {ep!r:.80}")
            eid = str(ep.get("id") or f"{mode}-{self.accelerator.process_index}-{self._tito_episodes}")
            self._tito_episodes += 1
            attached.append({"id": eid, "turns": ep["turns"]})
            if writer is not None and not untrained:  # the log holds what was trained
                # every field the rollout gave goes to the writer, which refuses (names) one it does not know
                record = {k: v for k, v in ep.items() if k not in ("input_ids", "loss_mask", "metadata")}
                metadata = {**(ep.get("metadata") or {}), "step": self.state.global_step, "mode": mode}
                try:
                    writer.write({**record, "id": eid, "input_ids": ids, "loss_mask": mask, "metadata": metadata})
                except RecordError as exc:  # the writer names the episode (its number, its id) and the log
                    raise RecordError(f"TitoGuardMixin: {exc}") from None
        if writer is not None:
            writer.flush()
        output[EPISODE_FIELD] = attached  # a list per row: TRL's shuffle and split keep it with its row
        return output

    # -- the guard, before the loss ----------------------------------------------------------------------------

    def compute_loss(
        self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        attached = inputs.get(EPISODE_FIELD)
        if attached is not None:
            self.tito_check(inputs, attached)
        return super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)

    def tito_check(self, batch: Mapping[str, Any], attached: Sequence[Mapping[str, Any]]) -> GuardResult:
        """``check_batch`` on one step's rows (each turn's ``prompt_ids`` included, when the rollout gave them),
        then TRL's flattened log-probs against the turns'; raises, warns or returns after ``tito_on_fail``."""
        rows = trained_rows(batch)
        logprobs = trained_logprobs(batch)
        masked = self._masked_whole(batch)
        checked = [n for n, untrained in enumerate(masked) if not untrained]
        items = [{"sampled": attached[n]["turns"], "input_ids": rows[n][0], "loss_mask": rows[n][1]} for n in checked]
        processing = getattr(self.processing_class, "tokenizer", self.processing_class)
        tokenizer = processing if self.tito_classes else None
        # the stop ids from the trainer's tokenizer even without classes: ids glued after a turn's stop are found
        stops = tokenizer_stops(processing) if hasattr(processing, "eos_token_id") else ()
        result = check_batch(items, on_fail="return", tokenizer=tokenizer, stop_ids=stops) if items else GuardResult()
        for f in result.failures:
            f.episode = checked[f.episode]  # the row in this step, as before
        failing = {f.episode for f in result.failures}
        uncompared = 0
        for n in checked:
            if logprobs is None or n in failing:
                continue
            compared, moved = _logprob_divergence(attached[n]["turns"], logprobs[n], *rows[n])
            self.tito_logprobs_checked += compared
            uncompared += not compared
            if moved is not None:
                result.failures.append(GuardFailure(n, moved, 0, 0, 0))
        result.failures.sort(key=lambda f: f.episode)
        if uncompared:
            result.not_checked.append(
                f"logprobs not checked on {uncompared} episode(s): TRL has the rollout's flattened logprobs, but the "
                "turns in tito_episode carry none (or not one per sampled id) to compare them with"
            )
        untrained = [str(attached[n]["id"]) for n, m in enumerate(masked) if m]
        if untrained:
            self.tito_masked.extend(untrained)
            result.not_checked.append(
                f"{len(untrained)} episode(s) truncated and masked whole by mask_truncated_completions: not trained "
                f"(intended), not compared: {', '.join(untrained)}"
            )
        self.tito_checked += result.episodes
        failed = [(str(attached[f.episode]["id"]), f) for f in result.failures]
        self.tito_failures.extend(failed)
        if failed and self.tito_on_fail == "raise":
            self.tito_close()
            error = TitoGuardError(result)
            error.add_note("episode ids: " + ", ".join(eid for eid, _ in failed))
            raise error
        if self.tito_on_fail == "log":
            for eid, f in failed:
                _LOG.warning("TITO guard: %s: %s", eid, f)
        for note in result.not_checked:  # what the guard cannot see holds for the whole run: said once, at first
            kind = note.split(" on ", 1)[0] if " not checked" in note else "masked"
            if kind not in self._tito_said and self.tito_on_fail != "return":
                self._tito_said.add(kind)
                _LOG.warning("TITO guard: %s", note)
        return result

    # -- closing ---------------------------------------------------------------------------------------------

    def train(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().train(*args, **kwargs)
        finally:
            self.tito_close()

    def tito_close(self) -> None:
        """Close the log this trainer opened (a ``LogWriter`` passed in is flushed, not closed)."""
        writer = self._tito_writer
        if writer is None:
            return
        if isinstance(self.tito_log, LogWriter):
            writer.flush()
        else:
            writer.close()
            self._tito_writer = None
