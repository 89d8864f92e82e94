"""Suppressions: findings a project has accepted, each with a written reason.

A suppressed finding stays in every report (marked, with its reason) so the gate never hides what it found;
it only stops counting towards check status, verdict and exit code. Entries live in ``[[suppress]]`` tables of
``--suppressions FILE``, else ``./tito-audit.toml``, else ``[tool.tito-audit]`` in ``./pyproject.toml``.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from tito_audit.audit.checks import REGISTRY, CheckResult, Finding
from tito_audit.errors import UsageError
from tito_audit.report.model_report import AuditReport, ModelReport

CONFIG_FILE = "tito-audit.toml"
_ENTRY_KEYS = {"model", "check", "scenario", "class", "reason"}
_CONFIG_KEYS = {"suppress"}


@dataclass
class Suppression:
    """One ``[[suppress]]`` entry. Patterns are fnmatch, case-insensitive; ``check`` is an exact id."""

    check: str
    reason: str
    model: str = "*"
    scenario: str = "*"
    cls: str = "*"
    where: str = ""  # "FILE entry N", for messages
    matched: int = 0

    def matches(self, names: set[str], finding: Finding) -> bool:
        return (
            finding.check == self.check
            and any(_glob(n, self.model) for n in names)
            and _glob(finding.scenario, self.scenario)
            and _glob(finding.cls, self.cls)
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "check": self.check,
            "scenario": self.scenario,
            "class": self.cls,
            "reason": self.reason,
            "where": self.where,
            "findings": self.matched,
        }


def _glob(value: str, pattern: str) -> bool:
    return fnmatchcase(value.casefold(), pattern.casefold())


def model_names(m: ModelReport) -> set[str]:
    """What a ``model`` pattern is matched against: the spec as given and the provenance repo id."""
    names = {m.model}
    if m.provenance is not None and m.provenance.repo_id:
        names.add(m.provenance.repo_id)
    return names


def _read_toml(path: Path, where: str) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise UsageError(where, f"cannot read suppressions: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(where, f"not valid TOML: {exc}") from None


def _replay_check_ids() -> tuple[str, ...]:
    """``tito-audit replay``'s check ids: its findings are suppressed the same way."""
    from tito_audit.replay.checks import CHECK_IDS

    return CHECK_IDS


def parse_suppressions(config: dict[str, Any], where: str) -> list[Suppression]:
    """Validate a config table (``{"suppress": [...]}``); any problem is one ``UsageError`` line."""
    unknown = sorted(set(config) - _CONFIG_KEYS)
    if unknown:
        raise UsageError(where, f"unknown key(s) {', '.join(map(repr, unknown))} (expected [[suppress]] tables)")
    entries = config.get("suppress", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise UsageError(where, "`suppress` must be an array of tables ([[suppress]])")
    out: list[Suppression] = []
    for n, entry in enumerate(entries, start=1):
        label = f"[[suppress]] entry {n}"
        bad_keys = sorted(set(entry) - _ENTRY_KEYS)
        if bad_keys:
            raise UsageError(where, f"{label}: unknown key(s) {', '.join(map(repr, bad_keys))}")
        not_str = sorted(k for k, v in entry.items() if not isinstance(v, str))
        if not_str:
            raise UsageError(where, f"{label}: {', '.join(not_str)} must be a string")
        check_id = entry.get("check", "").strip()
        if not check_id:
            raise UsageError(where, f"{label}: no `check` (give the id of the check whose findings are accepted)")
        known = {*REGISTRY, *_replay_check_ids()}
        if check_id not in known:
            raise UsageError(where, f"{label}: unknown check id {check_id!r} (known: {', '.join(sorted(known))})")
        reason = " ".join(entry.get("reason", "").split())
        if not reason:
            raise UsageError(
                where, f"{label} (check={check_id!r}): no `reason` (every suppression must say why it is safe)"
            )
        out.append(
            Suppression(
                check=check_id,
                reason=reason,
                model=entry.get("model", "*") or "*",
                scenario=entry.get("scenario", "*") or "*",
                cls=entry.get("class", "*") or "*",
                where=f"{where} entry {n}",
            )
        )
    return out


def load_suppressions(explicit: Path | None = None, cwd: Path | None = None) -> tuple[list[Suppression], str | None]:
    """The suppressions in force and the file they came from (``None`` when there is no config at all).

    ``explicit`` must exist. Otherwise ``tito-audit.toml`` in ``cwd`` wins over ``[tool.tito-audit]`` in its
    ``pyproject.toml``; a pyproject without that table is not a config.
    """
    if explicit is not None:
        data = _read_toml(explicit, str(explicit))
        return parse_suppressions(data, str(explicit)), str(explicit)
    cwd = cwd or Path.cwd()
    own = cwd / CONFIG_FILE
    if own.is_file():
        return parse_suppressions(_read_toml(own, CONFIG_FILE), CONFIG_FILE), CONFIG_FILE
    pyproject = cwd / "pyproject.toml"
    if pyproject.is_file():
        table = _read_toml(pyproject, "pyproject.toml").get("tool", {}).get("tito-audit")
        if table is not None:
            where = "pyproject.toml [tool.tito-audit]"
            if not isinstance(table, dict):
                raise UsageError(where, "must be a table")
            return parse_suppressions(table, where), where
    return [], None


def recompute(m: ModelReport) -> None:
    """Status, summary and verdict of a model from its active (unsuppressed) findings.

    A check whose findings are all suppressed passes, with "N suppressed" in its summary. The verdict is
    ``tito_audit.report.verdict.decide`` over the recomputed results: what suppressed findings still mean for the
    verdict is decided there, not here.
    """
    for c in m.checks:
        _recompute_check(c)
    m.decide()


def _recompute_check(c: CheckResult) -> None:
    suppressed = sum(1 for f in c.findings if f.suppressed)
    if not suppressed or c.status not in ("pass", "warn", "fail"):
        return
    active = c.active_findings
    if not active:
        c.status = "pass"
        c.summary = f"{suppressed} suppressed: {c.summary}"
    else:
        c.status = "fail" if c.severity == "error" else "warn"
        c.summary = f"{c.summary} ({suppressed} suppressed)"


def apply_suppressions(report: AuditReport, suppressions: list[Suppression], source: str | None) -> list[str]:
    """Mark matching findings suppressed (first matching entry wins), recompute, record used/unused.

    Returns one warning line per unused entry: a suppression that matches nothing is stale or mistyped.
    """
    for s in suppressions:
        s.matched = 0
    for m in report.models:
        names = model_names(m)
        touched = False
        for c in m.checks:
            for f in c.findings:
                if f.suppressed:
                    continue
                hit = next((s for s in suppressions if s.matches(names, f)), None)
                if hit is not None:
                    f.suppressed, f.suppression_reason = True, hit.reason
                    hit.matched += 1
                    touched = True
        if touched:
            recompute(m)
    used = [s for s in suppressions if s.matched]
    unused = [s for s in suppressions if not s.matched]
    report.suppressions = {
        "source": source,
        "used": [s.to_dict() for s in used],
        "unused": [s.to_dict() for s in unused],
    }
    return [
        f"warning: {s.where}: unused suppression (model={s.model!r}, check={s.check!r}, scenario={s.scenario!r}"
        f"{'' if s.cls == '*' else f', class={s.cls!r}'}) matched no finding in this run"
        for s in unused
    ]
