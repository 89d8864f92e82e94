"""The declared floor of every runtime dependency, as pins: ``name==lower`` for each ``name>=lower`` of
``[project].dependencies`` in pyproject.toml (an upper bound is kept beside it).

    python scripts/floor_requirements.py > floor.txt && pip install -r floor.txt

CI installs these into a second virtual environment and runs the audit-identity check there
(``scripts/report_identity.py``): the ranges pyproject.toml declares are the ranges CI proves, at both ends.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9_.\-\[\]]+)\s*(.*)$")


def floor_pins(dependencies: list[str]) -> list[str]:
    """``name==lower`` for each requirement with a ``>=lower``; a requirement without one is an error (no floor
    declared is no floor proven)."""
    pins = []
    for requirement in dependencies:
        match = _REQUIREMENT.match(requirement.split(";")[0])
        if match is None:
            raise SystemExit(f"floor_requirements: cannot read {requirement!r}")
        name, spec = match.group(1), match.group(2)
        lower = re.search(r">=\s*([^,\s]+)", spec)
        if lower is None:
            raise SystemExit(f"floor_requirements: {requirement!r} declares no floor (>=)")
        pins.append(f"{name}=={lower.group(1)}")
    return pins


def main() -> int:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    sys.stdout.write("\n".join(floor_pins(project["dependencies"])) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
