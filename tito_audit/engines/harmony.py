"""OpenAI's ``openai-harmony`` (how vLLM renders gpt-oss): chat messages become harmony messages the way vLLM's
chat endpoint converts them, and the library renders token ids.

- the first system message becomes the developer message's instructions, the tools its function tools; the
  system message harmony writes carries the audit's date and the ``reasoning_effort`` option (default medium);
- an assistant's ``reasoning_content`` (or ``reasoning``/``thinking``) is an ``analysis`` message, its text a
  ``final`` message (``commentary`` next to tool calls), each tool call a ``commentary`` message to
  ``functions.NAME`` with content type ``json``; a tool result comes from ``functions.NAME`` (the name of the call
  its ``tool_call_id`` answers, else its ``name``);
- with a generation prompt: ``render_conversation_for_completion`` (what the engine samples from); a conversation
  that ends with the assistant: ``render_conversation_for_training`` (its last turn closed as sampled); else
  ``render_conversation``. Harmony drops earlier analysis itself (``auto_drop_analysis``).

Offline: harmony downloads its vocabulary (``o200k_base.tiktoken``) unless ``TIKTOKEN_ENCODINGS_BASE`` names a
folder holding it. Unless the user set that variable, ``with_harmony_vocabulary`` points it at an empty private
folder (so harmony never reaches the network) and, when harmony finds nothing there, writes the file rebuilt from
the model's own tokenizer (a byte-level BPE vocabulary written as tiktoken ranks); harmony's own hash check decides
whether the rebuilt file is the one it wants. What was done is the engine's ``offline`` line.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tito_audit.engines.base import (
    Engine,
    EngineInfo,
    Message,
    Rendered,
    RendererRefused,
    RendererUnavailable,
    refused,
)
from tito_audit.errors import first_line
from tito_audit.registry import RENDERERS

if TYPE_CHECKING:
    from tito_audit.rendering.guard import RenderLimits
    from tito_audit.sources.load import LoadedModel

NAME = "openai-harmony"
VOCAB_FILE = "o200k_base.tiktoken"
BASE_VARIABLE = "TIKTOKEN_ENCODINGS_BASE"
_EFFORT = "reasoning_effort"
_T = TypeVar("_T")


_REBUILT: dict[str, bytes | None] = {}  # tokenizer digest -> its vocabulary rebuilt in tiktoken's format


def rebuilt_vocabulary(tokenizer: Any) -> bytes | None:
    """The tokenizer's byte-level BPE vocabulary in tiktoken's file format (base64 of each token's bytes, then its
    rank), or None where the tokenizer is not byte-level BPE."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    spec = json.loads(backend.to_str())
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or "ByteLevel" not in json.dumps(spec.get("decoder")):
        return None
    to_byte = {char: byte for byte, char in bytes_to_unicode().items()}
    lines = []
    for token, rank in sorted(model["vocab"].items(), key=lambda item: item[1]):
        try:
            raw = bytes(to_byte[c] for c in token)
        except KeyError:
            return None  # a token outside the byte alphabet: not a plain byte-level vocabulary
        lines.append(f"{base64.b64encode(raw).decode()} {rank}")
    return ("\n".join(lines) + "\n").encode()


def _digest(tokenizer: Any) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else repr(getattr(tokenizer, "name_or_path", id(tokenizer)))
    return hashlib.sha256(text.encode()).hexdigest()


def with_harmony_vocabulary(model_name: str, tokenizer: Any, build: Callable[[], _T]) -> tuple[_T, str]:
    """``build()`` (which may load harmony's encoding) reading harmony's vocabulary from a folder, never the
    network, and the offline line. The folder: the user's ``TIKTOKEN_ENCODINGS_BASE`` when set, else an empty
    private one; when harmony finds no vocabulary there, the one rebuilt from the model's tokenizer is put there
    and ``build`` runs again. ``RendererUnavailable`` with the reason when harmony still cannot load it."""
    if os.environ.get(BASE_VARIABLE):
        return _explained(model_name, build, f"{BASE_VARIABLE}={os.environ[BASE_VARIABLE]}"), ""
    with tempfile.TemporaryDirectory(prefix="tito-audit-tiktoken-") as folder:
        os.environ[BASE_VARIABLE] = folder
        try:
            try:
                return build(), ""  # harmony was not loaded, or found what it needs without the network
            except Exception as exc:
                if type(exc).__module__.split(".")[0] != "openai_harmony":
                    raise
                missing = first_line(exc)
            digest = _digest(tokenizer)
            if digest not in _REBUILT:
                _REBUILT[digest] = rebuilt_vocabulary(tokenizer)
            data = _REBUILT[digest]
            if data is None:
                raise RendererUnavailable(
                    model_name,
                    f"renderer {NAME}: harmony downloads {VOCAB_FILE}, not available offline ({missing}), and the "
                    f"model's tokenizer is not byte-level BPE to rebuild it from; set {BASE_VARIABLE} to a folder "
                    "holding the file",
                )
            (Path(folder) / VOCAB_FILE).write_bytes(data)
            out = _explained(model_name, build, "the file rebuilt from the model's tokenizer.json")
        finally:
            del os.environ[BASE_VARIABLE]
    return out, (
        f"openai-harmony downloads {VOCAB_FILE} ({BASE_VARIABLE} unset): rebuilt offline from the model's "
        "tokenizer.json, accepted by harmony's hash check"
    )


def _explained(model_name: str, build: Callable[[], _T], where: str) -> _T:
    try:
        return build()
    except Exception as exc:
        if type(exc).__module__.split(".")[0] != "openai_harmony":
            raise
        raise RendererUnavailable(
            model_name,
            f"renderer {NAME}: harmony cannot load {VOCAB_FILE} from {where}: {first_line(exc)}; "
            f"set {BASE_VARIABLE} to a folder holding the file",
        ) from None


def load_encoding(model_name: str, tokenizer: Any) -> tuple[Any, str]:
    """The gpt-oss harmony encoding and the offline line."""
    try:
        from openai_harmony import HarmonyEncodingName, load_harmony_encoding
    except ImportError:
        raise RendererUnavailable(
            model_name, f"renderer {NAME}: the package is not installed ({ENTRY.install_hint()})"
        ) from None
    return with_harmony_vocabulary(
        model_name, tokenizer, lambda: load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    )


class Harmony(Engine):
    def __init__(self, model_name: str, tokenizer: Any) -> None:
        from openai_harmony import HarmonyEncodingName

        self._encoding, note = load_encoding(model_name, tokenizer)
        self._tokenizer = tokenizer
        self.info = EngineInfo(
            NAME,
            f"openai-harmony {metadata.version('openai-harmony')}",
            "ids",
            offline=note,
            detail={"encoding": str(HarmonyEncodingName.HARMONY_GPT_OSS.value)},
        )
        probe = self._render_ids([{"role": "user", "content": "Hi"}], None, True, {}, dt.datetime(2024, 1, 1))
        if self._decodes_differently(probe):
            raise RendererUnavailable(
                model_name, f"renderer {NAME}: the model's tokenizer decodes harmony's ids differently (not o200k)"
            )

    def _decodes_differently(self, ids: list[int]) -> bool:
        """Whether the model's tokenizer decodes ``ids`` to another text than harmony does (checked on every render:
        the checks read a render as the text its ids decode to with the model's tokenizer)."""
        mine = self._encoding.decode_utf8(ids)
        theirs = self._tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return bool(mine != theirs)

    @property
    def option_names(self) -> frozenset[str]:
        return frozenset({_EFFORT})

    def option_values(self, name: str) -> tuple[Any, ...] | None:
        """``reasoning_effort``: the members of harmony's own ``ReasoningEffort``."""
        from openai_harmony import ReasoningEffort

        return tuple(member.lower() for member in ReasoningEffort.__members__) if name == _EFFORT else None

    def stop_ids(self) -> tuple[int, ...]:
        """What vLLM stops gpt-oss on: harmony's stop tokens for assistant actions (``<|call|>``, ``<|return|>``), in
        id order (harmony returns them in no fixed order)."""
        return tuple(sorted(int(i) for i in self._encoding.stop_tokens_for_assistant_actions()))

    def render(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        add_generation_prompt: bool,
        options: dict[str, Any],
        date: dt.datetime,
    ) -> Rendered:
        self.refuse_unknown(options)
        try:
            ids = self._render_ids(messages, tools, add_generation_prompt, options, date)
        except RendererRefused:
            raise
        except Exception as exc:
            raise refused(NAME, exc) from exc
        if self._decodes_differently(ids):
            raise RendererRefused(f"{NAME}: its ids decode differently with the model's tokenizer")
        return Rendered(ids=ids)

    def _render_ids(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        agp: bool,
        options: dict[str, Any],
        date: dt.datetime,
    ) -> list[int]:
        from openai_harmony import Conversation, Role

        conversation = Conversation.from_messages(_harmony_messages(messages, tools, options, date))
        if agp:
            return list(self._encoding.render_conversation_for_completion(conversation, Role.ASSISTANT))
        if messages and messages[-1].get("role") == "assistant":
            return list(self._encoding.render_conversation_for_training(conversation))
        return list(self._encoding.render_conversation(conversation))


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return "" if content is None else str(content)


def _arguments(call: dict[str, Any]) -> tuple[str, str]:
    function: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else call
    arguments = function.get("arguments", "")
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return str(function.get("name", "")), text


def _harmony_messages(
    messages: list[Message], tools: list[dict[str, Any]] | None, options: dict[str, Any], date: dt.datetime
) -> list[Any]:
    from openai_harmony import (
        Author,
        DeveloperContent,
        ReasoningEffort,
        Role,
        SystemContent,
        ToolDescription,
    )
    from openai_harmony import Message as HarmonyMessage

    effort = str(options.get(_EFFORT, "medium")).upper()
    if effort not in ReasoningEffort.__members__:
        raise RendererRefused(f"{NAME}: reasoning_effort must be low, medium or high, not {options.get(_EFFORT)!r}")
    system = (
        SystemContent.new()
        .with_reasoning_effort(ReasoningEffort[effort])
        .with_conversation_start_date(date.strftime("%Y-%m-%d"))
    )
    out = [HarmonyMessage.from_role_and_content(Role.SYSTEM, system)]
    rest = list(messages)
    instructions = ""
    if rest and rest[0].get("role") in ("system", "developer"):
        instructions = _text(rest.pop(0).get("content"))
    if instructions or tools:
        developer = DeveloperContent.new()
        if instructions:
            developer = developer.with_instructions(instructions)
        if tools:
            described = []
            for tool in tools:
                fn: dict[str, Any] = tool["function"] if isinstance(tool.get("function"), dict) else tool
                described.append(
                    ToolDescription.new(fn.get("name", ""), fn.get("description", ""), fn.get("parameters") or None)
                )
            developer = developer.with_function_tools(described)
        out.append(HarmonyMessage.from_role_and_content(Role.DEVELOPER, developer))
    call_names: dict[str, str] = {}
    for message in rest:
        role = message.get("role")
        if role == "assistant":
            reasoning = next(
                (message[k] for k in ("reasoning_content", "reasoning", "thinking") if message.get(k)), None
            )
            if reasoning:
                out.append(
                    HarmonyMessage.from_role_and_content(Role.ASSISTANT, str(reasoning)).with_channel("analysis")
                )
            calls = message.get("tool_calls") or []
            text = _text(message.get("content"))
            if text or not calls:
                channel = "commentary" if calls else "final"
                out.append(HarmonyMessage.from_role_and_content(Role.ASSISTANT, text).with_channel(channel))
            for call in calls:
                name, arguments = _arguments(call)
                if call.get("id"):
                    call_names[str(call["id"])] = name
                out.append(
                    HarmonyMessage.from_role_and_content(Role.ASSISTANT, arguments)
                    .with_channel("commentary")
                    .with_recipient(f"functions.{name}")
                    .with_content_type("json")
                )
        elif role == "tool":
            name = call_names.get(str(message.get("tool_call_id", "")), "") or str(message.get("name") or "")
            out.append(
                HarmonyMessage.from_author_and_content(
                    Author.new(Role.TOOL, f"functions.{name}"), _text(message.get("content"))
                )
                .with_channel("commentary")
                .with_recipient("assistant")
            )
        elif role in ("user", "system", "developer"):
            if role == "user":
                out.append(HarmonyMessage.from_role_and_content(Role.USER, _text(message.get("content"))))
            else:
                later = DeveloperContent.new().with_instructions(_text(message.get("content")))
                out.append(HarmonyMessage.from_role_and_content(Role.DEVELOPER, later))
        else:
            raise RendererRefused(f"{NAME}: no harmony author for role {role!r}")
    return out


def for_model(model: LoadedModel, choice: str | None, limits: RenderLimits | None) -> Engine:
    return Harmony(model.name, model.tokenizer)


ENTRY = RENDERERS.register(
    NAME,
    "OpenAI's openai-harmony, how vLLM renders gpt-oss",
    for_model,
    aliases=("harmony",),
    extra="harmony",
    order=30,
    meta={
        "library": "`openai-harmony`",
        "renders": "ids",
        "notes": "chat messages converted as vLLM's chat endpoint does; the date is the audit's `--date`",
    },
)
