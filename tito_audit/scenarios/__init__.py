"""Scenarios: synthetic multi-turn tool conversations, generated from a small declarative catalog."""

from tito_audit.scenarios.adapt import ADAPTERS, adapt_messages
from tito_audit.scenarios.catalog import CATALOG, build_scenarios
from tito_audit.scenarios.spec import Scenario, ScenarioSpec

__all__ = ["ADAPTERS", "CATALOG", "Scenario", "ScenarioSpec", "adapt_messages", "build_scenarios"]
