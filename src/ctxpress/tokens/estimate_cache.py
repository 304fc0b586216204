"""The per-profile estimate cache: a text (or a frozen structure) to its token estimate (S12).

The middleware recounts the whole thread on every model call and the messages do not change within
a run, so estimates are cached, keyed on content, never on a message's identity alone:

- a text is keyed on the ``str`` itself. Python caches a string's hash on the object and ``==``
  checks identity first, so finding a string seen before is O(1) whatever its length; an equal string
  in a new object (after a checkpoint load) is hashed once, not re-estimated; changed content is a
  different string, hence a different key;
- a tool call on its name, id and arguments (``messages.tool_call_key``), and flat arguments are also
  recognised again by the identity of their very objects (``EstimateCache.flat_calls``); list contents
  on their frozen blocks.

The cache keeps two generations of plain dicts (one ``dict.get`` per hit; what is used on every call
survives a rotation) within ``max_entries`` and ``max_chars``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from functools import partial
from typing import Any, Final

from ctxpress.tokens.estimate import estimate, estimates
from ctxpress.tokens.features_batch import BATCH_MIN_TEXTS

__all__ = ["CACHE_MAX_CHARS", "CACHE_MAX_ENTRIES", "EstimateCache"]

# Default bounds of each profile's cache. Holding a key keeps its string alive, so the character
# bound is the memory bound (16M characters: 16-64 MB of strings, most of them shared with live
# threads).
CACHE_MAX_ENTRIES: Final = 200_000
CACHE_MAX_CHARS: Final = 16_000_000
#: Texts missing from the cache from which a first count estimates them in one batch
#: (`messages.prefetch_texts`).
PREFETCH_MIN_TEXTS: Final = BATCH_MIN_TEXTS


def key_chars(key: Hashable) -> int:
    """Characters a cache key keeps alive (its strings; nested tuples counted recursively).

    Exact classes are tested first: a first count sizes hundreds of keys, and `isinstance` only
    serves subclasses."""
    kind = key.__class__
    if kind is str or kind is bytes:
        return len(key)  # type: ignore[arg-type]
    if kind is tuple:
        size = 1
        for part in key:  # type: ignore[attr-defined]
            part_kind = part.__class__
            if part_kind is str or part_kind is bytes:
                size += len(part)
            elif part_kind is tuple:
                size += key_chars(part)
            elif part_kind in _ATOMS:
                size += 1
            else:
                size += key_chars(part)
        return size
    if isinstance(key, str | bytes):
        return len(key)
    if isinstance(key, tuple):
        return sum(key_chars(part) for part in key) + 1
    return 1


# Key parts that are neither strings nor tuples, and count 1 (what `key_chars` gives any other).
_ATOMS: Final = frozenset({int, float, bool, type(None), type})


class EstimateCache:
    """Bounded cache from a text (or a frozen structure) to its token estimate, for one profile.

    Two generations of plain dicts approximate an LRU at the cost of a single `dict.get` per hit:
    new and re-used entries go to `young`; when `young` holds half the bounds it becomes `old` and
    the previous `old` is dropped, so what is used every call survives and the total stays within
    `max_entries` / `max_chars`.
    """

    def __init__(
        self,
        weights: tuple[float, ...],
        max_entries: int,
        max_chars: int,
        count_text: Callable[[str], int] | None = None,
    ) -> None:
        self.weights = weights
        #: Tokens of one text: the estimate under `weights`, or a real tokenizer's exact count.
        self.count_text: Callable[[str], int] = count_text or partial(estimate, weights=weights)
        #: Tokens of many texts at once (a first count of a thread), when they are estimates.
        self.count_texts: Callable[[Sequence[str]], list[int]] | None = (
            None if count_text else partial(estimates, weights=weights)
        )
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
        # Message class -> what it adds besides content and name (`messages._message_kind`), filled on
        # first sight of a class: `isinstance` is slow on pydantic models, a dict lookup is not.
        self.message_kinds: dict[type, int] = {}

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

    def put_many(self, entries: Sequence[tuple[Hashable, int]]) -> None:
        """`put` of each (key, tokens) of `entries`: a first count's batch, under one lock."""
        self.misses += len(entries)
        with self._lock:
            for key, tokens in entries:
                self._store_locked(key, tokens)

    def _store(self, key: Hashable, tokens: int) -> None:
        with self._lock:
            self._store_locked(key, tokens)

    def _store_locked(self, key: Hashable, tokens: int) -> None:
        size = key_chars(key)
        if 2 * size > self.max_chars or key in self.young:
            return  # too big to keep (the estimate is still right, just not cached), or kept already
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
        """The estimate of `text`, from the cache or computed and remembered now."""
        tokens = self.get(text)
        if tokens is None:
            tokens = self.put(text, self.count_text(text))
        return tokens
