"""What the TRL GRPOTrainer test (tests/trainer/test_trl_trainer.py) costs CI: issue 30 asks for under 3 minutes.

    python benchmarks/bench_trl_test.py [--repeat 2]

Times, each in a fresh process: the test file under pytest (imports, collection, both tests), each test's own
time (pytest's JUnit report), and the imports alone that the file adds to a run that has not made them yet
(torch, transformers, trl, datasets). CPU seconds beside wall seconds: the machine is shared, and the load average
at the start is recorded. Writes benchmarks/results/trl-test.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import machine, python, timed, write

TEST = "tests/trainer/test_trl_trainer.py"


def main(repeat: int) -> None:
    start = machine()
    runs = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "junit.xml"
            cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TEST, f"--junitxml={report}"]
            result = timed(cmd)
            cases = ET.parse(report).getroot().iter("testcase")
            result["tests_seconds"] = {c.get("name"): float(c.get("time") or 0) for c in cases}
        runs.append(result)
    imports = [timed(python("import torch, transformers, trl, datasets")) for _ in range(repeat)]
    for r in [*runs, *imports]:  # not sampled here (timed, not run): no tree peaks to report
        r.pop("peak_rss_tree_mb", None)
        r.pop("peak_pss_tree_mb", None)
    data = {
        "machine": start,
        "load_average_at_end": machine()["load_average_at_start"],
        "limit_seconds": 180,
        "file_under_pytest": runs,
        "imports_alone": imports,
        "max_wall_seconds": max(r["wall_seconds"] for r in runs),
        "max_cpu_seconds": max(r["cpu_seconds"] for r in runs),
    }
    assert all(r["rc"] == 0 for r in runs), [r.get("stderr_tail") for r in runs]
    path = write("trl-test", data)
    print(f"{path}: wall {[r['wall_seconds'] for r in runs]} s, CPU {[r['cpu_seconds'] for r in runs]} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    main(parser.parse_args().repeat)
