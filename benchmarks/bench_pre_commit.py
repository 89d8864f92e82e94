"""What the `language: python` pre-commit hook costs: building its environment is most of it.

    python benchmarks/bench_pre_commit.py      # -> benchmarks/results/pre-commit-hook.json

Measures, each in a fresh process (``measure.timed``): ``pip install`` of this checkout into a new virtual
environment (what pre-commit does once per hook ``rev``), and a whole ``pre-commit try-repo`` of the
``tito-audit-templates`` hook on one safe template in a scratch git repository (environment built from nothing,
then the hook run). The pip cache is whatever this machine has (warm after the first run); the load average at the
start is recorded, since wall time moves with other people's load and CPU time much less.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from measure import ROOT, machine, timed, write


def main() -> None:
    at_start = machine()
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        install = timed([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(ROOT)])
        repo = Path(tmp) / "repo"
        (repo / "templates").mkdir(parents=True)
        safe = ROOT / "templates_cache" / "qwen2.5-7b-instruct" / "chat_template.jinja"
        shutil.copy(safe, repo / "templates" / "a.jinja")
        for args in (["init", "-q"], ["add", "."], ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "t"]):
            subprocess.run(["git", *args], cwd=repo, check=True)
        script = (
            "import os, subprocess, sys; os.chdir(sys.argv[1]);"
            "os.environ['TITO_AUDIT_TEMPLATES_CACHE'] = sys.argv[2];"
            "sys.exit(subprocess.run([sys.executable, '-m', 'pre_commit', 'try-repo', sys.argv[3],"
            " 'tito-audit-templates', '--files', 'templates/a.jinja']).returncode)"
        )
        try_repo = timed([sys.executable, "-c", script, str(repo), str(ROOT / "templates_cache"), str(ROOT)])
    result = {"machine": at_start, "pip_install_fresh_venv": install, "pre_commit_try_repo_safe_template": try_repo}
    print(write("pre-commit-hook", result))


if __name__ == "__main__":
    main()
