"""Tokens of chat messages: the per-content counting behind every count of a request (S12).

A message costs a fixed overhead (role, delimiters), its content (text blocks as text; images and
other media at a fixed ``MEDIA_BLOCK_TOKENS`` each, never by their base64 length), its tool calls
(name and JSON arguments; each logical call once, even when it is both in ``tool_calls`` and in the
provider-format ``additional_kwargs``), and its ``name`` / ``tool_call_id``.

Every part is looked up in the profile's ``EstimateCache`` first, keyed on content: a text on the
string itself; a tool call on its name, id and arguments -- flat arguments by their value objects
(plus types, so ``1``, ``1.0`` and ``True`` differ) and recognised again by the identity of those
very objects, nested ones by their ``marshal`` serialisation; list contents on their frozen blocks.

``messages_tokens`` is the one implementation; one message is a sequence of one.
"""

from __future__ import annotations

import json
import marshal
from collections.abc import Callable, Hashable, Mapping, Sequence
from functools import partial
from operator import is_
from typing import Any, Final

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from ctxpress.tokens import features
from ctxpress.tokens.estimate import compiled_settings
from ctxpress.tokens.estimate_cache import PREFETCH_MIN_TEXTS, EstimateCache

__all__ = [
    "MEDIA_BLOCK_TOKENS",
    "MESSAGE_OVERHEAD_TOKENS",
    "NAME_OVERHEAD_TOKENS",
    "TOOL_CALL_OVERHEAD_TOKENS",
    "count_new_messages",
    "each_message_tokens",
    "langchain_message_kinds",
    "message_tokens",
    "messages_tokens",
    "prefetch_texts",
    "provider_json",
    "tool_call_key",
]

# Role and delimiters around each message (OpenAI's documented 3 + 1 for the role; ChatML is 4-5).
MESSAGE_OVERHEAD_TOKENS: Final = 4
# A `name` field costs its text plus about one token of framing.
NAME_OVERHEAD_TOKENS: Final = 1
# Framing around one tool call (function-call markers, the "arguments" wrapper).
TOOL_CALL_OVERHEAD_TOKENS: Final = 4
# Fixed cost of an image (or other media block): the model sees patches, not base64. Real costs range
# from 85 (OpenAI low detail) over 765 (OpenAI, 1024x1024 high detail) and ~1,300 (Qwen2.5-VL,
# 1024x1024) to ~1,600 (Anthropic, 1.15 MP); the pixel size is unknown here, so take a round middle.
MEDIA_BLOCK_TOKENS: Final = 1000

_MEDIA_BLOCK_TYPES: Final = frozenset(
    {"image", "image_url", "input_image", "file", "input_file", "audio", "input_audio", "video", "document"}
)
_TOOL_CALL_BLOCK_TYPES: Final = frozenset({"tool_use", "tool_call", "function_call", "server_tool_call"})


def _freeze(value: Any) -> Hashable:
    """A hashable key that differs whenever the JSON of `value` differs.

    `marshal` serialises JSON-like values in C, keeping types apart (`1`, `1.0` and `True` are equal
    in Python but not in JSON); other objects fall back to their repr.
    """
    try:
        return marshal.dumps(value)
    except ValueError:  # not marshallable (a custom object somewhere inside)
        return ("repr", repr(value))


def _provider_encoder() -> Callable[[Any], str]:
    """`json.dumps(value, ensure_ascii=False, default=str)`, minus the set-up it repeats per call.

    `JSONEncoder.encode` builds a new C encoder (and a dict for its circularity check) on every
    call, which costs more than encoding a typical tool call's arguments. This builds one, without
    that dict, so that it holds no state between calls and threads may share it; a circular value
    then exhausts the recursion limit, and the standard encoder says what is wrong.
    """
    standard = json.JSONEncoder(ensure_ascii=False, default=str)
    make_encoder = getattr(json.encoder, "c_make_encoder", None)
    encode_string = getattr(json.encoder, "c_encode_basestring", None)
    if make_encoder is None or encode_string is None:  # an interpreter without the C accelerator
        return standard.encode
    chunks_of = make_encoder(
        None,
        standard.default,
        encode_string,
        None,
        standard.key_separator,
        standard.item_separator,
        False,
        False,
        True,  # sort_keys, skipkeys, allow_nan: JSONEncoder's defaults
    )

    def encode(value: Any) -> str:
        try:
            return "".join(chunks_of(value, 0))
        except RecursionError:
            return standard.encode(value)  # ValueError("Circular reference detected"), if it is one

    return encode


_PROVIDER_JSON: Final = _provider_encoder()


def provider_json(value: Any) -> str:
    """`value` as JSON the way providers receive tool arguments and schemas (langchain-openai:
    ensure_ascii=False)."""
    return _PROVIDER_JSON(value)


_SCALAR_TYPES: Final = frozenset({str, int, float, bool, type(None)})


def tool_call_key(name: str, call_id: Any, arguments: Any) -> tuple[Any, ...]:
    """The estimate-cache key of one tool call; its length is 5 exactly for flat scalar arguments."""
    if arguments.__class__ is dict:
        values = arguments.values()
        if _SCALAR_TYPES.issuperset(map(type, values)):
            # The usual flat arguments: the value objects themselves (a long `content` string is
            # hashed once, then found by identity), plus their types to keep 1 / 1.0 / True apart.
            return ("call", name, call_id, tuple(arguments.items()), tuple(map(type, values)))
    elif arguments.__class__ is str:
        return ("call", name, call_id, arguments)  # provider format: JSON text
    return ("call", name, call_id, _freeze(arguments))


def _tool_call_tokens(cache: EstimateCache, name: str, arguments: Any, call_id: Any) -> int:
    """One logical tool call: its name and its arguments as JSON (a provider string is used as is)."""
    key = tool_call_key(name, call_id, arguments)
    tokens = cache.get(key)
    if tokens is None:
        text = arguments if isinstance(arguments, str) else provider_json(arguments)
        tokens = cache.put(key, TOOL_CALL_OVERHEAD_TOKENS + cache.count_text(name) + cache.count_text(text))
    if len(key) == 5:  # flat scalar arguments (see `tool_call_key`): remember them by identity
        cache.remember_flat_call(arguments, name, call_id, tokens)
    return tokens


def _provider_calls_duplicate(calls: list[Any], extra: dict[str, Any]) -> bool:
    """True when `additional_kwargs` holds provider-format copies of `tool_calls`, in order, and no
    legacy `function_call` (other keys such as `refusal` are not calls)."""
    raw_calls = extra.get("tool_calls")
    if "function_call" in extra or raw_calls.__class__ is not list or len(raw_calls) != len(calls):
        return False
    return all(
        raw.__class__ is dict and raw.get("id") == call.get("id") and call.get("id") is not None
        for raw, call in zip(raw_calls, calls, strict=True)
    )


def _tool_calls_tokens(message: AIMessage, cache: EstimateCache) -> int:
    """Tool calls of an AI message, each logical call once across `tool_calls`, `invalid_tool_calls`
    and the provider-format `additional_kwargs["tool_calls"]` / `["function_call"]`."""
    total = 0
    recall = cache.flat_calls.get
    for call in message.tool_calls:
        arguments = call["args"]
        seen = recall(id(arguments))
        # Same dict, same keys and the very same scalar value objects => the same JSON: exact, and
        # no hashing of the arguments at all.
        if (
            seen is not None
            and seen[0] is arguments
            and seen[1] == call["name"]
            and seen[2] == call.get("id")
            and len(seen[3]) == len(arguments)
            and all(map(is_, seen[3], arguments))
            and all(map(is_, seen[4], arguments.values()))
        ):
            total += seen[5]
        else:
            total += _tool_call_tokens(cache, call["name"], arguments, call.get("id"))
    invalid = message.invalid_tool_calls
    extra = message.additional_kwargs
    if not invalid and not extra:
        return total
    if not invalid and _provider_calls_duplicate(message.tool_calls, extra):
        return total  # the usual case: provider format mirrors `tool_calls` one to one
    seen_ids: set[Any] = {call.get("id") for call in message.tool_calls}
    seen_names: set[str] = {call["name"] for call in message.tool_calls}
    for bad in invalid:
        if bad.get("id") is None or bad.get("id") not in seen_ids:
            name = bad.get("name") or ""
            total += _tool_call_tokens(cache, name, bad.get("args") or "", bad.get("id"))
            seen_ids.add(bad.get("id"))
            seen_names.add(name)
    for raw in extra.get("tool_calls") or ():
        if isinstance(raw, Mapping) and raw.get("id") not in seen_ids:
            function = raw.get("function") or {}
            name = function.get("name") or ""
            total += _tool_call_tokens(cache, name, function.get("arguments") or "", raw.get("id"))
            seen_ids.add(raw.get("id"))
            seen_names.add(name)
    function_call = extra.get("function_call")
    # The legacy single function call; LangChain may also have parsed it into `tool_calls`.
    if isinstance(function_call, Mapping) and (function_call.get("name") or "") not in seen_names:
        total += _tool_call_tokens(
            cache, function_call.get("name") or "", function_call.get("arguments") or "", None
        )
    return total


def _is_media_block(block: Mapping[str, Any]) -> bool:
    """An image, audio, video or file block, or any block carrying base64 data."""
    if block.get("type") in _MEDIA_BLOCK_TYPES or "base64" in block or block.get("source_type") == "base64":
        return True
    source = block.get("source")
    return isinstance(source, Mapping) and source.get("type") == "base64"


def _block_key(block: Any) -> Hashable:
    """What the count of one content block depends on (see `_block_tokens`)."""
    if block.__class__ is str:
        return block
    if isinstance(block, Mapping):
        if _is_media_block(block):
            return ("media",)  # never look at (or hash) the base64 payload
        if block.get("type") == "text" and block.get("text").__class__ is str:
            return ("text", block["text"])  # the string itself: O(1) when seen before
    return _freeze(block)


def _block_tokens(block: Any, cache: EstimateCache, tool_call_ids: frozenset[Any]) -> int:
    if isinstance(block, str):
        return cache.text(block)
    if not isinstance(block, Mapping):
        return cache.text(str(block))
    if _is_media_block(block):
        return MEDIA_BLOCK_TOKENS
    kind = block.get("type")
    if kind == "text":
        return cache.text(str(block.get("text") or ""))
    if kind in ("reasoning", "thinking"):
        return cache.text(str(block.get("reasoning") or block.get("thinking") or ""))
    if kind in _TOOL_CALL_BLOCK_TYPES:
        if block.get("id") in tool_call_ids:
            return 0  # the same call is in `message.tool_calls`, counted there
        arguments = block.get("input", block.get("args", block.get("arguments", {})))
        return _tool_call_tokens(cache, str(block.get("name") or ""), arguments, block.get("id"))
    # Unknown block: its JSON, as a provider would receive it.
    return cache.text(provider_json(dict(block)))


def _list_content_tokens(message: BaseMessage, content: list[Any], cache: EstimateCache) -> int:
    calls = message.tool_calls if isinstance(message, AIMessage) else ()
    tool_call_ids = frozenset(call.get("id") for call in calls)
    key = ("blocks", tuple(_block_key(block) for block in content), tuple(sorted(map(str, tool_call_ids))))
    tokens = cache.get(key)
    if tokens is None:
        tokens = cache.put(key, sum(_block_tokens(block, cache, tool_call_ids) for block in content))
    return tokens


def _content_tokens(message: BaseMessage, content: Any, cache: EstimateCache) -> int:
    if content.__class__ is str:
        return cache.text(content)
    if isinstance(content, list):
        return _list_content_tokens(message, content, cache)
    return cache.text(str(content))  # not a LangChain content type; count what a provider would get


# What a message class adds besides content and name.
_PLAIN, _AI, _TOOL = 1, 2, 3  # all truthy: `kinds.get(cls) or _message_kind(cache, cls)`


def _kind_of_class(message_class: type) -> int:
    """`_AI`, `_TOOL` or `_PLAIN`: what `message_class` adds besides content and name."""
    if issubclass(message_class, AIMessage):
        return _AI
    if issubclass(message_class, ToolMessage):
        return _TOOL
    return _PLAIN


def _message_kind(cache: EstimateCache, message_class: type) -> int:
    """`_kind_of_class(message_class)`, remembered in the cache's class table."""
    kind = cache.message_kinds[message_class] = _kind_of_class(message_class)
    return kind


def langchain_message_kinds() -> dict[type, int]:
    """The kinds of LangChain's four usual message classes, for a new cache's class table: a first
    sight then finds their kinds at once (the compiled walk hands a class it does not know yet to
    the Python count)."""
    return {cls: _kind_of_class(cls) for cls in (HumanMessage, SystemMessage, AIMessage, ToolMessage)}


def messages_tokens(messages: Sequence[BaseMessage], cache: EstimateCache) -> int:
    """Sum over `messages` of overhead + content + name + tool calls (AI) or tool_call_id (tool)."""
    return sum(each_message_tokens(messages, cache))


def each_message_tokens(messages: Sequence[BaseMessage], cache: EstimateCache) -> list[int]:
    """The tokens of each of `messages`: overhead + content + name + tool calls (AI) or
    tool_call_id (tool).

    The one implementation of a message's count, written as a loop because counting a whole thread
    is the hot path: the warm path of every part is one dict lookup, and the lookups are bound once
    per call, not once per message.
    """
    lookup = cache.young.get  # if the cache rotates meanwhile, misses fall through to `cache.text`
    kind_of = cache.message_kinds.get
    counts: list[int] = []
    for message in messages:
        content = message.content
        tokens = lookup(content) if content.__class__ is str else None
        total = MESSAGE_OVERHEAD_TOKENS + (
            _content_tokens(message, content, cache) if tokens is None else tokens
        )
        name = message.name
        if name:
            tokens = lookup(name)
            total += NAME_OVERHEAD_TOKENS + (cache.text(name) if tokens is None else tokens)
        kind = kind_of(message.__class__) or _message_kind(cache, message.__class__)
        if kind == _TOOL:
            tool_call_id = message.tool_call_id  # type: ignore[attr-defined]
            tokens = lookup(tool_call_id)
            total += cache.text(tool_call_id) if tokens is None else tokens
        elif kind == _AI and (message.tool_calls or message.invalid_tool_calls or message.additional_kwargs):  # type: ignore[attr-defined]
            total += _tool_calls_tokens(message, cache)  # type: ignore[arg-type]
        counts.append(total)
    return counts


_OVERHEADS: Final = (MESSAGE_OVERHEAD_TOKENS, NAME_OVERHEAD_TOKENS, TOOL_CALL_OVERHEAD_TOKENS)


def count_new_messages(
    messages: Sequence[BaseMessage], fields: Sequence[tuple[Any, ...]], cache: EstimateCache
) -> list[int]:
    """`each_message_tokens` of messages the caller has not counted before (a thread's first sight,
    for the whole-message memo, which passes the `fields` it has just read from each message:
    ``message_memo.message_fields``), the same numbers by the fastest way at hand:

    - with the compiled scan and an estimating cache, one C walk over those fields
      (``features.COMPILED_SCAN.first_sight``; the messages are not read a second time): the common
      shapes are estimated in C, any other message is counted by `each_message_tokens`. The walk
      leaves the per-content cache as it was: the memo keeps the counts, so what a first sight
      would add to it is seldom read again;
    - else their texts estimated in one batch (`prefetch_texts`), then counted one by one.
    """
    scan = features.COMPILED_SCAN
    if scan is not None and cache.count_texts is not None:
        return scan.first_sight(
            messages,
            fields,
            *compiled_settings(cache.weights),
            cache.message_kinds,
            _OVERHEADS,
            provider_json,
            partial(message_tokens, cache=cache),
        )
    prefetch_texts(messages, cache)
    return each_message_tokens(messages, cache)


def prefetch_texts(messages: Sequence[BaseMessage], cache: EstimateCache) -> None:
    """Estimate what `messages` need that `cache` lacks -- string contents, names, tool-call ids,
    and each call of `tool_calls` (its name and JSON arguments) -- in one batch, before the messages
    are counted one by one: a first count of a thread pays one scan's fixed cost, not one per text.
    The cache ends up with the same keys and counts as counting them one by one would leave."""
    if cache.count_texts is None:
        return  # a real tokenizer's counts: nothing to batch
    texts: dict[str, None] = {}  # missing plain texts, once each, in order
    calls: list[tuple[tuple[Any, ...], str, Any, Any, str]] = []  # missing: key, name, id, args, JSON
    kind_of = cache.message_kinds.get
    lookup = cache.get
    for message in messages:
        content = message.content
        if content.__class__ is str and lookup(content) is None:
            texts[content] = None
        if message.name and lookup(message.name) is None:
            texts[message.name] = None
        kind = kind_of(message.__class__) or _message_kind(cache, message.__class__)
        if kind == _TOOL:
            if lookup(message.tool_call_id) is None:  # type: ignore[attr-defined]
                texts[message.tool_call_id] = None  # type: ignore[attr-defined]
        elif kind == _AI:
            for call in message.tool_calls:  # type: ignore[attr-defined]
                name, arguments, call_id = call["name"], call["args"], call.get("id")
                call_key = tool_call_key(name, call_id, arguments)
                if lookup(call_key) is None:
                    text = arguments if isinstance(arguments, str) else provider_json(arguments)
                    calls.append((call_key, name, call_id, arguments, text))
    batch = [*texts, *(part for _, name, _, _, text in calls for part in (name, text))]
    if len(batch) < PREFETCH_MIN_TEXTS:
        return  # a few texts: counting them one by one costs less than gathering them
    tokens = cache.count_texts(batch)
    entries: list[tuple[Hashable, int]] = list(zip(texts, tokens, strict=False))
    parts = iter(tokens[len(texts) :])
    for (key, name, call_id, arguments, _), name_tokens, arguments_tokens in zip(
        calls, parts, parts, strict=True
    ):
        call_tokens = TOOL_CALL_OVERHEAD_TOKENS + name_tokens + arguments_tokens
        entries.append((key, call_tokens))
        if len(key) == 5:  # flat scalar arguments: recognised by identity, as `_tool_call_tokens` does
            cache.remember_flat_call(arguments, name, call_id, call_tokens)
    cache.put_many(entries)  # a call met twice in this batch is kept once


def message_tokens(message: BaseMessage, cache: EstimateCache) -> int:
    """Tokens of one message: `messages_tokens` of a sequence of one."""
    return messages_tokens((message,), cache)
