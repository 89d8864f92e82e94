"""The verl and SkyRL examples (issue 30.2) run without those frameworks, and their logs replay.

Each example wires ``LogWriter`` into a stand-in of the framework's rollout code; the scripted engine splits a
token in every third reply (two of the eight turns here). As written, the loops are exact, and replay says so. Then
each framework's own merge is broken the way such loops break (verl: the assistant turn decoded and re-encoded
instead of appended; SkyRL: its ``postprocessed_action`` path, which re-encodes the action text), and replay of the
same hook's log finds exactly the split turns: the hooks log what the engine returned, not what the loop made of it.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import IN_CI, ROOT
from tito_audit.replay import ReplayContext, replay_log

EXAMPLES = ROOT / "examples"


def example(name: str) -> ModuleType:
    sys.path.insert(0, str(EXAMPLES))  # the examples import scripted_engine as a sibling, as when run as scripts
    try:
        spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(EXAMPLES))
        sys.modules.pop(f"example_{name}", None)


@pytest.fixture(scope="module")
def ctx(loaded):
    return ReplayContext.from_model(loaded("qwen2.5-7b-instruct"))


def reencoded_turn(self: Any, runtime_token_ids: list[int], assistant_token_ids: list[int]) -> list[int]:
    text = self.tokenizer.decode(assistant_token_ids, skip_special_tokens=False)
    return runtime_token_ids + self.tokenizer.encode(text, add_special_tokens=False)


SKYRL = pytest.param(  # writes Parquet; in CI pyarrow is installed (the parquet extra)
    "skyrl_generator",
    marks=pytest.mark.skipif(
        importlib.util.find_spec("pyarrow") is None and not IN_CI, reason="pyarrow is not installed"
    ),
)


@pytest.mark.parametrize("name", ["verl_agent_loop", SKYRL])
@pytest.mark.parametrize("broken", [False, True])
def test_framework_example_logs_replay(ctx, tmp_path, monkeypatch, capsys, name, broken):
    module = example(name)
    if broken and name == "verl_agent_loop":
        monkeypatch.setattr(module.ToolAgentLoop, "ct_merge_assistant_token", reencoded_turn)
    if broken and name == "skyrl_generator":
        step = module.WeatherEnv.step
        monkeypatch.setattr(module.WeatherEnv, "step", lambda env, a: {**step(env, a), "postprocessed_action": a})
    log = module.main(tmp_path)
    assert "4 trajectories logged" in capsys.readouterr().out
    totals = replay_log(log, ctx)
    assert totals.episodes == 4 and totals.turns == 8 and totals.malformed == 0
    # the engine's logged prompts are the reference (not only the turns), and the template's render measured drift
    assert totals.reference_engine == 4 and totals.drift_episodes == 4
    assert totals.noncanonical_turns == totals.whatif_diverged == 2  # the two split replies
    if broken:
        assert totals.diverged_episodes == totals.diverged_turns == 2
        assert dict(totals.by_class) == {"non_canonical": 2}
    else:
        assert totals.diverged_episodes == totals.trained_not_sampled == totals.sampled_not_trained == 0
        assert totals.mask_flips == 0 and totals.drift_diverged == 0  # the loop's context is the template's
