"""The line of a chat template a finding comes from, when the template's own code says so.

Token-level divergences have no line of their own; some root causes do, read statically from the template:
the ``if`` that drops earlier reasoning depending on the turn's position (a history rewrite), the call that
reads the date or the time (``time_invariance``, ``time_of_day``), the output of ``bos_token`` (``double_bos``).
Used for SARIF regions; any other finding stays on the file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tito_audit.report.model_report import ModelReport


@dataclass(frozen=True)
class Blame:
    line: int
    why: str


# Where a model folder keeps its template; any other template file came from ``--chat-template``.
MODEL_FILES = ("chat_template.jinja", "chat_template.json", "tokenizer_config.json", "additional_chat_templates/")


def local_template(m: ModelReport) -> tuple[Path, str] | None:
    """The audited template as a Jinja file the user has (in a local model folder, or ``--chat-template``) and
    its text, only when the file still holds exactly the audited template."""
    p = m.provenance
    if p is None:
        return None
    in_model = p.template_file.startswith(MODEL_FILES)
    if in_model and p.source != "local":
        return None  # a Hub or bundled model's own file: not in the user's repository
    path = Path(m.model) / p.template_file if in_model else Path(p.template_file)
    if path.suffix != ".jinja":
        return None  # lines of a JSON file are not the template's lines
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return (path, text) if hashlib.sha256(text.encode("utf-8")).hexdigest() == p.template_sha256 else None


def blame(text: str, check_id: str, cls: str) -> Blame | None:
    """The line responsible for a finding of ``check_id`` / class ``cls`` in template ``text``, if known."""
    if cls == "history_rewrite":
        from tito_audit.rendering.reasoning_conditions import positional_reasoning_conditions

        conditions = positional_reasoning_conditions(text)
        if conditions:
            line, cond = conditions[0]
            return Blame(line, f"`if {cond}` renders reasoning depending on the turn's position")
    if check_id in ("time_invariance", "time_of_day"):
        from tito_audit.rendering.analysis import hazards

        dated = [h for h in hazards(text) if h.kind == "reads_date" and h.line]
        if dated and dated[0].line:
            return Blame(dated[0].line, dated[0].detail)
    if check_id == "double_bos":
        writes = [n for n, ln in enumerate(text.splitlines(), 1) if "bos_token" in ln]
        if writes:
            return Blame(writes[0], "the template writes bos_token itself")
    return None
