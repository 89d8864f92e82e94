"""Ctrl-C is never swallowed: one that lands in a ``__del__`` (where Python can only print ``Exception ignored``
and go on) is remembered, raised again at the next look (``check``), and turns the command's exit code into 130."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.conftest import ROOT


def run(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, env=env
    )


def test_an_interrupt_inside_a_destructor_is_remembered_and_raised_again() -> None:
    done = run(
        """
        import os, signal
        from tito_audit.workers import interrupt

        interrupt.install()

        class Collected:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while a destructor runs
                for _ in range(100000):
                    pass

        item = Collected()
        del item  # the KeyboardInterrupt is raised inside __del__, where it cannot propagate
        print("went on", interrupt.seen())
        try:
            interrupt.check()
        except KeyboardInterrupt:
            print("raised again")
        """
    )
    assert done.stdout.splitlines() == ["went on True", "raised again"]
    assert "Exception ignored" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr


def test_a_swallowed_interrupt_still_ends_the_command_with_130() -> None:
    done = run(
        """
        import sys
        from tito_audit.cli import main
        from tito_audit.workers import interrupt

        interrupt._seen = True  # as if a Ctrl-C had been swallowed while the command ran
        sys.argv = ["tito-audit", "--version"]
        main()
        """
    )
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert done.stdout.startswith("tito-audit ")
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interrupted"), done.stderr
