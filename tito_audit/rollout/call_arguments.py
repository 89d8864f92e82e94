"""A tool call's arguments, read as a loop reads them: a dict, or the JSON string of one that OpenAI's wire format
sends (chat templates get either, and a rollout log holds either)."""

from __future__ import annotations

import json
from typing import Any


def arguments_dict(arguments: Any) -> dict[str, Any] | None:
    """A tool call's arguments as the dict they are, or that their JSON string writes (OpenAI's wire format sends
    them as a string; chat templates get either), else None: a string that is not JSON, or JSON of another type.
    The one place that reads both forms, so every caller agrees on which strings are arguments and which are not;
    what a caller does with None (the text itself, one argument, nothing) is its own."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):  # not JSON, or nested too deeply to decode
            return None
    return arguments if isinstance(arguments, dict) else None
