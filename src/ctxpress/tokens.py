"""Approximate token counts for the pressure decision and preview lengths (S12).

Counts are approximate and never used for billing. ``len(text) / 4`` -- what LangChain's
``count_tokens_approximately`` does -- suits English but undercounts Chinese by 50-75%: a Chinese
character costs 0.5-1.3 tokens, not a quarter. This module counts by character class instead.

Method
------
One linear pass over the text's UTF-8 bytes counts (``FEATURE_NAMES``):

- CJK ideographs; CJK / full-width punctuation; kana and hangul; other BMP symbols (“”—…→, box
  drawing); two-byte letters (accented Latin, Greek, Cyrillic); astral characters (emoji);
- ASCII letters and letter runs (a word is about one token, long words more), digits and digit runs
  (tokenizers cut digits into groups of 1-3, Qwen into single digits), punctuation and punctuation
  runs (JSON's ``": "`` or ``"},{"`` are one or two tokens), spaces and space runs (indentation),
  newlines and newline runs;
- ``\\uXXXX`` escapes, as ``json.dumps`` writes non-ASCII text by default (3-5 tokens each).

The estimate is the weighted sum of those counts, rounded up. Each profile's weights were fitted to
a real tokenizer on half of a real-text corpus (``bench/fit_token_profiles.py``), with one rule from
how tokenizers pre-split text: an ASCII letter run or a digit group (a digit, for Qwen) starts a
pre-token, so it costs at least one token. The error on the other half, and on whole real threads,
is in ``docs/benchmarks.md`` (``bench/token_estimate.py``).

The pass is pure Python made only of whole-buffer C operations -- ``str.encode``, ``bytes.translate``,
``bytes.count``, and one big-integer ``x & ~(x << 8)`` that marks where runs start -- so no Python
code runs per character.

Profiles
--------
- ``cl100k``: OpenAI GPT-4 / GPT-3.5-turbo.
- ``o200k``: OpenAI GPT-4o, GPT-4.1, o-series and later.
- ``qwen``: Qwen2.5 / Qwen3.
- ``deepseek``: DeepSeek-V3 / R1.
- ``default``: an unknown model. Fitted to sit inside -10% / +25% of o200k, Qwen, DeepSeek and
  Llama 3 on every measured text type, as close to the middle of that window as they allow, so it
  leans high. It cannot also cover cl100k on Chinese text (cl100k needs 1.4-1.6x the tokens of the
  others there) and undercounts it by ~25%: use ``cl100k`` for GPT-4 / GPT-3.5.

Messages and the cache
----------------------
A message costs a fixed overhead (role, delimiters), its content (text blocks as text; images and
other media at a fixed ``MEDIA_BLOCK_TOKENS`` each, never by their base64 length), its tool calls
(name and JSON arguments; each logical call once, even when it is both in ``tool_calls`` and in the
provider-format ``additional_kwargs``), and its ``name`` / ``tool_call_id``.

The middleware recounts the whole thread on every model call and the messages do not change within
a run, so estimates are cached per profile, keyed on content, never on a message's identity alone:

- a text is keyed on the ``str`` itself. Python caches a string's hash on the object and ``==``
  checks identity first, so finding a string seen before is O(1) whatever its length; an equal string
  in a new object (after a checkpoint load) is hashed once, not re-estimated; changed content is a
  different string, hence a different key;
- a tool call on its name, id and arguments: flat arguments by their value objects (plus types, so
  ``1``, ``1.0`` and ``True`` differ) and recognised again by the identity of those very objects;
  nested ones by their ``marshal`` serialisation. List contents on their frozen blocks;
- tool schemas per tool object (treated as immutable, like LangChain's own per-instance schema memo).

The cache keeps two generations of plain dicts (one ``dict.get`` per hit; what is used on every call
survives a rotation) within ``CACHE_MAX_ENTRIES`` and ``CACHE_MAX_CHARS`` per profile.

On top of it, ``count_request_tokens(..., immutable_messages=True)`` -- what the middleware calls,
since a LangGraph state's messages are replaced and never edited in place -- remembers each whole
message's count by its id and finds it again by comparing the message's fields
(``ctxpress.message_memo``): identity checks for the same objects, a deep equality in C after a
checkpoint reload. Without that flag the count sees even a nested list or dict edited in place.
"""

from __future__ import annotations

import json
import marshal
import math
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from operator import is_
from typing import Any, Final

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from ctxpress.message_memo import FIELDS_BY_CLASS, MessageMemo, fields_getter

__all__ = [
    "FEATURE_NAMES",
    "MEDIA_BLOCK_TOKENS",
    "PROFILE_NAMES",
    "clear_token_cache",
    "count_message_tokens",
    "count_request_tokens",
    "count_tools_tokens",
    "estimate_tokens",
    "text_features",
    "token_cache_info",
]

PROFILE_NAMES: tuple[str, ...] = ("default", "cl100k", "o200k", "qwen", "deepseek")

# Role and delimiters around each message (OpenAI's documented 3 + 1 for the role; ChatML is 4-5).
MESSAGE_OVERHEAD_TOKENS: Final = 4
# A `name` field costs its text plus about one token of framing.
NAME_OVERHEAD_TOKENS: Final = 1
# Framing around one tool call (function-call markers, the "arguments" wrapper).
TOOL_CALL_OVERHEAD_TOKENS: Final = 4
# Framing around each tool schema in the tool list.
TOOL_SCHEMA_OVERHEAD_TOKENS: Final = 4
# Once per request: the primer of the reply ("<|im_start|>assistant\n" or the like).
REQUEST_OVERHEAD_TOKENS: Final = 3
# Fixed cost of an image (or other media block): the model sees patches, not base64. Real costs range
# from 85 (OpenAI low detail) over 765 (OpenAI, 1024x1024 high detail) and ~1,300 (Qwen2.5-VL,
# 1024x1024) to ~1,600 (Anthropic, 1.15 MP); the pixel size is unknown here, so take a round middle.
MEDIA_BLOCK_TOKENS: Final = 1000

_MEDIA_BLOCK_TYPES: Final = frozenset(
    {"image", "image_url", "input_image", "file", "input_file", "audio", "input_audio", "video", "document"}
)
_TOOL_CALL_BLOCK_TYPES: Final = frozenset({"tool_use", "tool_call", "function_call", "server_tool_call"})


# --------------------------------------------------------------------------------------------------
# Character-class features
# --------------------------------------------------------------------------------------------------

FEATURE_NAMES: tuple[str, ...] = (
    "han",  # CJK ideographs (U+4000-9FFF)
    "cjk_punct",  # CJK symbols and punctuation (U+3000-303F), full-width forms (U+FF00-FF7F)
    "kana_hangul",  # the rest of U+3000-3FFF (kana, ...) and U+A000-DFFF (hangul, ...)
    "other_bmp",  # other three-byte characters: “”—…, arrows, box drawing, private use, ...
    "two_byte",  # U+0080-07FF: accented Latin, Greek, Cyrillic, Hebrew, Arabic, ...
    "astral",  # U+10000 and above: emoji, rare ideographs
    "letters",
    "letter_runs",
    "digits",
    "digit_runs",
    "punct",  # ASCII punctuation and control characters other than whitespace
    "punct_runs",
    "spaces",  # space and tab
    "space_runs",
    "newlines",  # \n and \r
    "newline_runs",
    "json_escapes",  # \uXXXX
)

# Each UTF-8 byte is translated to one class byte. ASCII classes are single bits, so that
# `x & ~(x << 8)` over the whole buffer (as one big integer) leaves exactly the first byte of every
# run. Non-ASCII classes use only the top three bits, so they can never be mistaken for an ASCII
# class in that arithmetic.
_LETTER, _DIGIT, _SPACE, _NEWLINE, _PUNCT = 0x01, 0x02, 0x04, 0x08, 0x10
_LEAD_TWO_BYTE = 0x20  # C0-DF
_LEAD_HAN = 0x40  # E4-E9: U+4000-9FFF
_LEAD_KANA_HANGUL = 0x60  # E3: U+3000-3FFF (CJK symbols, kana, ...); EA-ED: U+A000-DFFF (hangul, ...)
_CONTINUATION = 0x80  # 80-BF
_LEAD_OTHER_BMP = 0xC0  # E0-E2, EE, EF
_LEAD_ASTRAL = 0xE0  # F0-FF


def _byte_class(byte: int) -> int:
    if byte < 0x80:
        char = chr(byte)
        if char.isalpha():
            return _LETTER
        if char.isdigit():
            return _DIGIT
        if char in " \t":
            return _SPACE
        if char in "\r\n":
            return _NEWLINE
        return _PUNCT
    if byte < 0xC0:
        return _CONTINUATION
    if byte < 0xE0:
        return _LEAD_TWO_BYTE
    if 0xE4 <= byte <= 0xE9:
        return _LEAD_HAN
    if byte == 0xE3 or 0xEA <= byte <= 0xED:
        return _LEAD_KANA_HANGUL
    if byte < 0xF0:
        return _LEAD_OTHER_BMP
    return _LEAD_ASTRAL


_CLASS_TABLE: Final = bytes(_byte_class(byte) for byte in range(256))
_DIGIT_B, _SPACE_B, _NEWLINE_B, _PUNCT_B = (bytes([flag]) for flag in (_DIGIT, _SPACE, _NEWLINE, _PUNCT))
_LETTER_B = bytes([_LETTER])
_KANA_HANGUL_B, _OTHER_BMP_B = bytes([_LEAD_KANA_HANGUL]), bytes([_LEAD_OTHER_BMP])
_TWO_BYTE_B, _ASTRAL_B = bytes([_LEAD_TWO_BYTE]), bytes([_LEAD_ASTRAL])


def text_features(text: str) -> tuple[int, ...]:
    """Counts of each class in FEATURE_NAMES order, in one linear pass of C-level operations.

    Speed notes: `bytes.count` slows down with the share of matching bytes, so the most frequent
    classes (letters; ideographs and continuation bytes in Chinese) are never counted but derived
    from the character and byte totals; and the three two-byte searches for CJK punctuation run only
    when the text has characters of their lead byte.
    """
    data = text.encode("utf-8", "surrogatepass")
    size = len(data)
    classes = data.translate(_CLASS_TABLE)
    as_int = int.from_bytes(classes, "little")
    # Bit k of a byte survives iff the byte has class bit k and the byte before it does not.
    run_starts = (as_int & ~(as_int << 8)).to_bytes(size, "little")

    if text.isascii():  # O(1): CPython records it on the string
        han = cjk_punct = kana_hangul = other_bmp = two_byte = astral = 0
        ascii_chars = size
    else:
        kana_and_symbols = classes.count(_KANA_HANGUL_B)
        other_and_full_width = classes.count(_OTHER_BMP_B)
        two_byte = classes.count(_TWO_BYTE_B)
        astral = classes.count(_ASTRAL_B)
        continuations = size - len(text)  # 1, 2 or 3 per two-, three- or four-byte character
        three_byte = (continuations - two_byte - 3 * astral) // 2
        han = three_byte - kana_and_symbols - other_and_full_width
        cjk_symbols = data.count(b"\xe3\x80") if kana_and_symbols else 0  # U+3000-303F
        full_width = (  # U+FF00-FF7F
            data.count(b"\xef\xbc") + data.count(b"\xef\xbd") if other_and_full_width else 0
        )
        cjk_punct = cjk_symbols + full_width
        kana_hangul = kana_and_symbols - cjk_symbols
        other_bmp = other_and_full_width - full_width
        ascii_chars = len(text) - two_byte - three_byte - astral

    digits = classes.count(_DIGIT_B)
    spaces = classes.count(_SPACE_B)
    newlines = classes.count(_NEWLINE_B)
    punct = classes.count(_PUNCT_B)
    return (
        han,
        cjk_punct,
        kana_hangul,
        other_bmp,
        two_byte,
        astral,
        ascii_chars - digits - spaces - newlines - punct,
        run_starts.count(_LETTER_B),
        digits,
        run_starts.count(_DIGIT_B),
        punct,
        run_starts.count(_PUNCT_B),
        spaces,
        run_starts.count(_SPACE_B),
        newlines,
        run_starts.count(_NEWLINE_B),
        data.count(b"\\u") if b"\\" in data else 0,
    )


# Tokens per unit of each feature, per profile, in FEATURE_NAMES order.
# Generated by `.venv/bin/python bench/fit_token_profiles.py`; do not edit by hand.
# fmt: off
PROFILE_WEIGHTS: Final[Mapping[str, tuple[float, ...]]] = {
    "default": (0.7401, 0.0, 0.7976, 0.6548, 0.33, 2.0, 0.0, 1.0, 0.5001, 1.0, 0.4548, 0.3802, 0.0949, 0.0, 0.3677, 0.5606, -1.082),
    "cl100k": (1.2226, 0.7665, 1.1167, 0.0, 0.4692, 2.0, 0.0, 1.0, 0.0, 1.0, 0.7602, 0.0, 0.0599, 0.0243, 0.2262, 0.0, -0.492),
    "o200k": (0.758, 0.5323, 0.7439, 0.3795, 0.2943, 2.0, 0.0, 1.0, 0.0, 1.0, 0.5306, 0.3557, 0.0124, -0.0, 0.2558, 0.3994, -0.5127),
    "qwen": (0.6046, 0.7735, 0.7883, 0.6157, 0.3657, 2.0, 0.0, 1.0, 1.0, 0.058, 0.37, 0.5286, 0.0, 0.0, 0.6743, 0.1011, -0.84),
    "deepseek": (0.5439, 0.7455, 0.7904, 0.5181, 0.3317, 2.0, 0.0, 1.0, 0.0046, 1.0, 0.4365, 0.5718, 0.0, 0.0, 0.5966, 0.2811, -0.6079),
}
# fmt: on


def _weights(profile: str) -> tuple[float, ...]:
    try:
        return PROFILE_WEIGHTS[profile]
    except KeyError:
        raise ValueError(
            f"unknown token profile {profile!r}; choose one of {', '.join(PROFILE_NAMES)}"
        ) from None


#: Letters a letter run may average before its length starts to count: the fitted weights price a
#: word at about one token whatever its length, which holds for prose but not for a blob with no
#: spaces (base64, minified code), where tokenizers spend about one token per few letters.
LETTERS_PER_RUN_FREE: Final = 12
LETTERS_PER_EXTRA_TOKEN: Final = 4
_LETTERS = FEATURE_NAMES.index("letters")
_LETTER_RUNS = FEATURE_NAMES.index("letter_runs")


def _estimate(text: str, weights: tuple[float, ...]) -> int:
    if not text:
        return 0
    features = text_features(text)
    total = sum(weight * count for weight, count in zip(weights, features, strict=True))
    excess = features[_LETTERS] - LETTERS_PER_RUN_FREE * features[_LETTER_RUNS]
    if excess > 0:
        total += excess / LETTERS_PER_EXTRA_TOKEN
    return max(1, math.ceil(total))  # a non-empty text is at least one token


def estimate_tokens(text: str, profile: str = "default") -> int:
    """Approximate token count of `text` for the tokenizer family `profile` (not cached)."""
    return _estimate(text, _weights(profile))


# --------------------------------------------------------------------------------------------------
# The per-profile estimate cache
# --------------------------------------------------------------------------------------------------

# Bounds of each profile's cache. Holding a key keeps its string alive, so the character bound is
# the memory bound (16M characters: 16-64 MB of strings, most of them shared with live threads).
CACHE_MAX_ENTRIES: Final = 200_000
CACHE_MAX_CHARS: Final = 16_000_000
# Bounds of each profile's whole-message memo (`count_request_tokens(..., immutable_messages=True)`):
# ids remembered, and the estimated tokens of the fields it keeps alive (about 4 characters each).
MESSAGE_MEMO_MAX_ENTRIES: Final = 100_000
MESSAGE_MEMO_MAX_TOKENS: Final = 4_000_000


def _key_chars(key: Hashable) -> int:
    """Characters a cache key keeps alive (its strings; nested tuples counted recursively)."""
    if isinstance(key, str | bytes):
        return len(key)
    if isinstance(key, tuple):
        return sum(_key_chars(part) for part in key) + 1
    return 1


class _EstimateCache:
    """Bounded cache from a text (or a frozen structure) to its token estimate, for one profile.

    Two generations of plain dicts approximate an LRU at the cost of a single `dict.get` per hit:
    new and re-used entries go to `young`; when `young` holds half the bounds it becomes `old` and
    the previous `old` is dropped, so what is used every call survives and the total stays within
    `max_entries` / `max_chars`.
    """

    def __init__(self, weights: tuple[float, ...], max_entries: int, max_chars: int) -> None:
        self.weights = weights
        self.max_entries = max_entries
        self.max_chars = max_chars
        self.young: dict[Hashable, int] = {}
        self.old: dict[Hashable, int] = {}
        self.young_chars = 0
        self.old_chars = 0
        self.misses = 0
        self._lock = threading.Lock()
        # id(arguments dict) -> (the dict, name, call id, its keys, its values, tokens): flat tool-call
        # arguments recognised by identity. Holding the objects keeps their ids from being reused.
        self.flat_calls: dict[int, tuple[Any, ...]] = {}
        self.flat_calls_chars = 0
        # Whole messages by id, for callers whose messages are values (see `ctxpress.message_memo`).
        self.messages = MessageMemo(MESSAGE_MEMO_MAX_ENTRIES, MESSAGE_MEMO_MAX_TOKENS)

    def get(self, key: Hashable) -> int | None:
        tokens = self.young.get(key)
        if tokens is None:
            tokens = self.old.get(key)
            if tokens is not None:
                self._store(key, tokens)  # promote: still in use
        return tokens

    def put(self, key: Hashable, tokens: int) -> int:
        self.misses += 1
        self._store(key, tokens)
        return tokens

    def _store(self, key: Hashable, tokens: int) -> None:
        size = _key_chars(key)
        if 2 * size > self.max_chars:
            return  # too big to keep; the estimate is still right, just not cached
        with self._lock:
            if key in self.young:
                return
            if 2 * (len(self.young) + 1) > self.max_entries or 2 * (self.young_chars + size) > self.max_chars:
                self.old, self.old_chars = self.young, self.young_chars
                self.young, self.young_chars = {}, 0
            self.young[key] = tokens
            self.young_chars += size

    def remember_flat_call(self, arguments: dict[str, Any], name: str, call_id: Any, tokens: int) -> None:
        size = sum(len(value) for value in arguments.values() if value.__class__ is str) + 1
        with self._lock:
            # A quarter of each bound; clearing at once is fine, the entries are rebuilt on use.
            if (
                4 * (len(self.flat_calls) + 1) > self.max_entries
                or 4 * (self.flat_calls_chars + size) > self.max_chars
            ):
                self.flat_calls.clear()
                self.flat_calls_chars = 0
            self.flat_calls[id(arguments)] = (
                arguments,
                name,
                call_id,
                tuple(arguments),
                tuple(arguments.values()),
                tokens,
            )
            self.flat_calls_chars += size

    def text(self, text: str) -> int:
        tokens = self.get(text)
        if tokens is None:
            tokens = self.put(text, _estimate(text, self.weights))
        return tokens


_caches: dict[str, _EstimateCache] = {}
_caches_lock = threading.Lock()


def _cache(profile: str) -> _EstimateCache:
    cache = _caches.get(profile)
    if cache is None:
        weights = _weights(profile)
        with _caches_lock:
            cache = _caches.setdefault(profile, _EstimateCache(weights, CACHE_MAX_ENTRIES, CACHE_MAX_CHARS))
    return cache


def clear_token_cache() -> None:
    """Drop every cached estimate (tests, benchmarks)."""
    with _caches_lock:
        _caches.clear()
    with _tool_cache_lock:
        _tool_cache.clear()


def token_cache_info(profile: str = "default") -> dict[str, int]:
    """Entries, characters held, bounds and misses of one profile's cache."""
    cache = _cache(profile)
    return {
        "entries": len(cache.young) + len(cache.old),
        "chars": cache.young_chars + cache.old_chars,
        "max_entries": cache.max_entries,
        "max_chars": cache.max_chars,
        "misses": cache.misses,
        "messages": len(cache.messages),
        "message_misses": cache.messages.misses,
    }


# --------------------------------------------------------------------------------------------------
# Messages
# --------------------------------------------------------------------------------------------------


def _freeze(value: Any) -> Hashable:
    """A hashable key that differs whenever the JSON of `value` differs.

    `marshal` serialises JSON-like values in C, keeping types apart (`1`, `1.0` and `True` are equal
    in Python but not in JSON); other objects fall back to their repr.
    """
    try:
        return marshal.dumps(value)
    except ValueError:  # not marshallable (a custom object somewhere inside)
        return ("repr", repr(value))


def _dumps(value: Any) -> str:
    # As providers receive tool arguments (langchain-openai: ensure_ascii=False).
    return json.dumps(value, ensure_ascii=False, default=str)


_SCALAR_TYPES: Final = frozenset({str, int, float, bool, type(None)})


def _tool_call_key(name: str, call_id: Any, arguments: Any) -> tuple[Any, ...]:
    if arguments.__class__ is dict:
        values = arguments.values()
        if _SCALAR_TYPES.issuperset(map(type, values)):
            # The usual flat arguments: the value objects themselves (a long `content` string is
            # hashed once, then found by identity), plus their types to keep 1 / 1.0 / True apart.
            return ("call", name, call_id, tuple(arguments.items()), tuple(map(type, values)))
    elif arguments.__class__ is str:
        return ("call", name, call_id, arguments)  # provider format: JSON text
    return ("call", name, call_id, _freeze(arguments))


def _tool_call_tokens(cache: _EstimateCache, name: str, arguments: Any, call_id: Any) -> int:
    """One logical tool call: its name and its arguments as JSON (a provider string is used as is)."""
    key = _tool_call_key(name, call_id, arguments)
    tokens = cache.get(key)
    if tokens is None:
        text = arguments if isinstance(arguments, str) else _dumps(arguments)
        tokens = cache.put(
            key, TOOL_CALL_OVERHEAD_TOKENS + _estimate(name, cache.weights) + _estimate(text, cache.weights)
        )
    if len(key) == 5:  # flat scalar arguments (see `_tool_call_key`): remember them by identity
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


def _tool_calls_tokens(message: AIMessage, cache: _EstimateCache) -> int:
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


def _block_tokens(block: Any, cache: _EstimateCache, tool_call_ids: frozenset[Any]) -> int:
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
    return cache.text(_dumps(dict(block)))


def _list_content_tokens(message: BaseMessage, content: list[Any], cache: _EstimateCache) -> int:
    calls = message.tool_calls if isinstance(message, AIMessage) else ()
    tool_call_ids = frozenset(call.get("id") for call in calls)
    key = ("blocks", tuple(_block_key(block) for block in content), tuple(sorted(map(str, tool_call_ids))))
    tokens = cache.get(key)
    if tokens is None:
        tokens = cache.put(key, sum(_block_tokens(block, cache, tool_call_ids) for block in content))
    return tokens


def _content_tokens(message: BaseMessage, content: Any, cache: _EstimateCache) -> int:
    if content.__class__ is str:
        return cache.text(content)
    if isinstance(content, list):
        return _list_content_tokens(message, content, cache)
    return cache.text(str(content))  # not a LangChain content type; count what a provider would get


# What a message class adds besides content and name. `isinstance` is slow on pydantic models (their
# metaclass is an ABCMeta), so the answer is looked up per class.
_PLAIN, _AI, _TOOL = 1, 2, 3  # all truthy: `kind_of(cls) or _kind(cls)`
_KIND_BY_CLASS: dict[type, int] = {}


def _kind(message_class: type) -> int:
    kind = _KIND_BY_CLASS.get(message_class)
    if kind is None:
        kind = (
            _AI
            if issubclass(message_class, AIMessage)
            else _TOOL
            if issubclass(message_class, ToolMessage)
            else _PLAIN
        )
        _KIND_BY_CLASS[message_class] = kind
    return kind


def _message_tokens(message: BaseMessage, cache: _EstimateCache) -> int:
    """Overhead + content + name + tool calls (AI) or tool_call_id (tool). The warm path of every
    part is one dict lookup; `count_request_tokens` runs this same logic inlined."""
    lookup = cache.young.get
    content = message.content
    tokens = lookup(content) if content.__class__ is str else None
    total = MESSAGE_OVERHEAD_TOKENS + (_content_tokens(message, content, cache) if tokens is None else tokens)
    name = message.name
    if name:
        tokens = lookup(name)
        total += NAME_OVERHEAD_TOKENS + (cache.text(name) if tokens is None else tokens)
    kind = _KIND_BY_CLASS.get(message.__class__) or _kind(message.__class__)
    if kind == _TOOL:
        tool_call_id = message.tool_call_id  # type: ignore[attr-defined]
        tokens = lookup(tool_call_id)
        total += cache.text(tool_call_id) if tokens is None else tokens
    elif kind == _AI and (message.tool_calls or message.invalid_tool_calls or message.additional_kwargs):  # type: ignore[attr-defined]
        total += _tool_calls_tokens(message, cache)  # type: ignore[arg-type]
    return total


def count_message_tokens(message: BaseMessage, profile: str = "default") -> int:
    """Approximate tokens of one message: overhead, content, tool calls, `name` and `tool_call_id`."""
    return _message_tokens(message, _cache(profile))


# --------------------------------------------------------------------------------------------------
# Tools and whole requests
# --------------------------------------------------------------------------------------------------

TOOL_CACHE_MAX_ENTRIES: Final = 4096
# tool object id -> (the tool itself, so the id cannot be reused while cached; profile -> tokens)
_tool_cache: OrderedDict[int, tuple[Any, dict[str, int]]] = OrderedDict()
_tool_cache_lock = threading.Lock()


def _tool_tokens(tool: BaseTool | Mapping[str, Any], profile: str) -> int:
    entry = _tool_cache.get(id(tool))
    if entry is not None and entry[0] is tool:
        tokens = entry[1].get(profile)
        if tokens is not None:
            return tokens
    schema = convert_to_openai_tool(tool)
    tokens = TOOL_SCHEMA_OVERHEAD_TOKENS + estimate_tokens(_dumps(schema), profile)
    with _tool_cache_lock:
        entry = _tool_cache.get(id(tool))
        if entry is None or entry[0] is not tool:
            entry = (tool, {})
            _tool_cache[id(tool)] = entry
            while len(_tool_cache) > TOOL_CACHE_MAX_ENTRIES:
                _tool_cache.popitem(last=False)
        entry[1][profile] = tokens
    return tokens


def count_tools_tokens(tools: Sequence[BaseTool | dict[str, Any]] | None, profile: str = "default") -> int:
    """Approximate tokens of the tool schemas, as the OpenAI-format JSON a provider receives.

    Cached per tool object: schemas are built once per tool and profile.
    """
    if not tools:
        return 0
    _weights(profile)  # fail on an unknown profile even when every tool is cached
    return sum(_tool_tokens(tool, profile) for tool in tools)


def _memoized_messages_tokens(messages: Sequence[BaseMessage], cache: _EstimateCache) -> int:
    """Sum of `_message_tokens` over `messages`, each taken from the whole-message memo when its
    fields are unchanged. The young generation's latest slot is checked inline: the hot path."""
    memo = cache.messages
    recent = memo.young.get
    getter_of = FIELDS_BY_CLASS.get
    total = 0
    for message in messages:
        fields = (getter_of(message.__class__) or fields_getter(message.__class__))(message)
        key = message.id or id(message)
        entry = recent(key)
        if entry is not None and entry[1] == fields:  # identity checks when it is the same message
            total += entry[2]
            if entry[0] is not message:  # an equal copy (a checkpoint reload)
                memo.adopt(key, message, fields, entry)
        else:
            total += memo.count(key, message, fields, _message_tokens, cache)
    return total


def count_request_tokens(
    messages: Sequence[BaseMessage],
    system_message: SystemMessage | None = None,
    tools: Sequence[BaseTool | dict[str, Any]] | None = None,
    profile: str = "default",
    *,
    immutable_messages: bool = False,
) -> int:
    """Approximate tokens of a whole model request: messages, system message, tool schemas and a
    small per-request constant.

    Warm (messages seen before) this is a dict lookup per message plus, for AI messages with tool
    calls, one `marshal.dumps` per call; it is the middleware's hot path, hence the inlining.

    `immutable_messages=True` is the caller's promise that no message is edited in place between
    two counts (true of a LangGraph state, whose messages are replaced, never edited): each message's
    count is then remembered whole by its id and found again by comparing its fields
    (`ctxpress.message_memo`) -- a few identity checks per message on the next call of a run, a deep
    equality in C after a checkpoint reload. The result is the same count either way.
    """
    cache = _cache(profile)
    count_messages = _memoized_messages_tokens if immutable_messages else _messages_tokens
    total = REQUEST_OVERHEAD_TOKENS + count_messages(messages, cache)
    if system_message is not None:
        total += _message_tokens(system_message, cache)
    return total + count_tools_tokens(tools, profile)


def _messages_tokens(messages: Sequence[BaseMessage], cache: _EstimateCache) -> int:
    """Sum of `_message_tokens` over `messages`, with that function inlined (the per-content path)."""
    lookup = cache.young.get  # if the cache rotates meanwhile, misses fall through to `cache.text`
    kind_of = _KIND_BY_CLASS.get
    total = MESSAGE_OVERHEAD_TOKENS * len(messages)
    for message in messages:  # `_message_tokens`, inlined: the per-content path of every exact count
        content = message.content
        tokens = lookup(content) if content.__class__ is str else None
        total += _content_tokens(message, content, cache) if tokens is None else tokens
        name = message.name
        if name:
            tokens = lookup(name)
            total += NAME_OVERHEAD_TOKENS + (cache.text(name) if tokens is None else tokens)
        kind = kind_of(message.__class__) or _kind(message.__class__)
        if kind == _TOOL:
            tool_call_id = message.tool_call_id  # type: ignore[attr-defined]
            tokens = lookup(tool_call_id)
            total += cache.text(tool_call_id) if tokens is None else tokens
        elif kind == _AI and (message.tool_calls or message.invalid_tool_calls or message.additional_kwargs):  # type: ignore[attr-defined]
            total += _tool_calls_tokens(message, cache)  # type: ignore[arg-type]
    return total
