"""What pyproject.toml promises, CI proves: the declared floors (a second environment runs the identity check at
them), and a wheel that carries the bundled set (installed outside the clone, it runs the README's first
command)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from floor_requirements import floor_pins

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_floor_pins_are_the_declared_lower_bounds() -> None:
    pins = floor_pins(PROJECT["dependencies"])
    assert len(pins) == len(PROJECT["dependencies"])
    for requirement, pin in zip(PROJECT["dependencies"], pins, strict=True):
        name, lower = pin.split("==")
        assert requirement.startswith(name) and re.search(rf">=\s*{re.escape(lower)}\b", requirement)
    with pytest.raises(SystemExit, match="declares no floor"):
        floor_pins(["rich"])


def test_the_floors_are_the_ones_the_identity_check_proved() -> None:
    """transformers 5.22 changes verdicts (it keeps None-valued message keys that 5.23 drops): 5.23 is the floor
    the identity check passes at (docs/dependencies.md); tokenizers 0.23.1 gives the same reports at eight times
    the CPU (``len(tokenizer)`` costs half a second there)."""
    floors = dict(pin.split("==") for pin in floor_pins(PROJECT["dependencies"]))
    assert floors["transformers"] == "5.23" and floors["tokenizers"] == "0.23.2" and floors["jinja2"] == "3.1.6"


def test_ci_proves_both_ends() -> None:
    lines = [ln.split("#")[0].strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    lines = [ln for ln in lines if ln]
    text = "\n".join(lines)
    tests = next(k for k, ln in enumerate(lines) if ln.endswith("python -m pytest -q"))
    wheel = next(k for k, ln in enumerate(lines) if "pip wheel" in ln)
    readme = next(k for k, ln in enumerate(lines) if "wheel-venv/bin/tito-audit" in ln)
    assert wheel < readme < tests and 'cd "$SCRATCH"' in lines[readme]  # outside the clone
    assert 'tito-audit" audit --bundled --quiet' in lines[readme] and "-u PYTHONPATH" in lines[readme]
    assert "scripts/floor_requirements.py" in text and 'floor-venv/bin/python" -m pip install' in text
    floor = next(k for k, ln in enumerate(lines) if 'floor-venv/bin/python" scripts/report_identity.py snapshot' in ln)
    compare = next(k for k, ln in enumerate(lines) if "report_identity.py compare" in ln)
    assert floor < compare < tests


def test_the_bundled_set_lives_in_the_package() -> None:
    from tito_audit.sources.bundled import bundled_names, cache_root

    assert cache_root().resolve().parent == (ROOT / "tito_audit").resolve()
    assert "qwen3-0.6b" in bundled_names()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["tito_audit"]
    assert "templates_cache/*/*" in data and "templates_cache/index.json" in data


@pytest.mark.slow
def test_the_wheel_carries_the_bundled_set(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "tito_audit", source / "tito_audit", ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path / "dist"), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "dist").glob("tito_audit-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    bundled = ROOT / "tito_audit" / "templates_cache"
    expected = {f"tito_audit/templates_cache/{p.relative_to(bundled).as_posix()}" for p in bundled.rglob("*")}
    assert {p for p in expected if not (ROOT / p).is_dir()} <= shipped
    pages = ROOT / "tito_audit" / "formats" / "templates"  # the HTML pages' own jinja2 templates
    assert {f"tito_audit/formats/templates/{p.name}" for p in pages.iterdir()} <= shipped
