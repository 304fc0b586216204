"""Whole-message token counts remembered by message id, for callers whose messages are values.

The middleware counts the whole thread on every model call. Inside a LangGraph run the messages of
the state are values: nodes and reducers replace a message (a new object; ``add_messages`` replaces
by id), they do not edit one in place. Under that premise a message's count depends only on the
fields it is made of, so this memo keeps, per message id, those fields and the count:

- the same object again (the next model call of the same run): the fields are the very same
  objects, and comparing the two field tuples is a handful of identity checks -- no hashing, no
  per-tool-call work;
- an equal message in new objects (a checkpoint reload between two runs): the comparison is a deep
  equality done in C (``memcmp`` for strings), several times cheaper than hashing every string
  again and rebuilding the tool-call keys;
- anything else -- a field reassigned, a compacted copy under the same id, another message class --
  compares unequal and is counted afresh.

Each id keeps two slots, because the L1 path alternates between a message and its compacted copy,
which keeps the message's id.

Above the per-message entries, each thread's last counted list is kept whole with its total: a list
that starts with it (the next call, a reload with the new turn appended) costs one comparison of
the two field lists in C, and only its new messages are looked up one by one.

What the premise excludes, and this memo cannot see: a nested list or dict of a message (list
content, tool-call arguments) edited in place between two counts. A count without
``immutable_messages`` sees even that, since its per-content cache keys on the content itself.
Equality also treats ``1``, ``1.0`` and ``True`` in tool arguments as the same value, so a message
whose id was kept while such a value changed type keeps its earlier count, off by a token or two
(counts are approximate, S12).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from itertools import repeat
from operator import attrgetter
from typing import Any, Final, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

__all__ = ["MESSAGE_MEMO_MAX_ENTRIES", "MESSAGE_MEMO_MAX_TOKENS", "MessageMemo", "message_fields"]

# Default bounds of a memo: ids remembered, and the estimated tokens of the fields it keeps alive
# (about 4 characters each).
MESSAGE_MEMO_MAX_ENTRIES: Final = 100_000
MESSAGE_MEMO_MAX_TOKENS: Final = 4_000_000

# The fields a message's count reads (see `messages.messages_tokens`), with the class first so that
# a message of another class under the same id never matches.
_PLAIN_FIELDS: Final = attrgetter("__class__", "content", "name")
_TOOL_FIELDS: Final = attrgetter("__class__", "content", "name", "tool_call_id")
_AI_FIELDS: Final = attrgetter(
    "__class__", "content", "name", "tool_calls", "invalid_tool_calls", "additional_kwargs"
)
FieldsGetter = Callable[[Any], tuple[Any, ...]]

#: One memo entry: the message object last seen with the latest fields, those fields and their
#: count, then the fields and count of the version before (or None, 0).
Entry = tuple[Any, tuple[Any, ...], int, tuple[Any, ...] | None, int]
#: A message not found in the memo's latest slots: its key, the message and its fields.
Unseen = tuple[Hashable, BaseMessage, tuple[Any, ...]]
#: The lists of message fields last counted under one thread's key, latest first, with their totals.
Requests = tuple[tuple[list[tuple[Any, ...]], int], ...]
#: Threads whose lists are kept (`MessageMemo.requests`): about one per live thread.
REQUEST_RECORDS_MAX_ENTRIES: Final = 1024
_Context = TypeVar("_Context")
#: Counts messages the memo has not seen: (messages, their `message_fields`, context) -> a count each.
CountMessages = Callable[[Sequence[BaseMessage], Sequence[tuple[Any, ...]], _Context], list[int]]


def fields_getter(message_class: type) -> FieldsGetter:
    """The getter of the fields a message of `message_class` is counted from."""
    if issubclass(message_class, AIMessage):
        return _AI_FIELDS
    if issubclass(message_class, ToolMessage):
        return _TOOL_FIELDS
    return _PLAIN_FIELDS


def message_fields(message: BaseMessage) -> tuple[Any, ...]:
    """The tuple of everything a message's token count depends on (class first)."""
    return fields_getter(message.__class__)(message)


def _request_key(messages: Sequence[BaseMessage]) -> Hashable:
    """A thread's key: its first two messages' ids. After a summary the first is the summary
    message, whose id (``ctxpress-summary-<n>``) other threads share; the second is the first message
    kept raw."""
    first = messages[0]
    if len(messages) == 1:
        return first.id or id(first)
    second = messages[1]
    return (first.id or id(first), second.id or id(second))


class MessageMemo:
    """Bounded memo of whole-message counts, keyed by `message.id` (or the object's `id()` when it
    has none), each entry holding the last two versions seen under that key.

    A key only narrows the search: an entry gives back a count only for equal fields, so a reused
    `id()` of a freed object or an id shared by two different messages costs a recount, never a
    wrong count. The entry also holds the message object last seen, so that the hot loop can tell
    the same object (identity checks only) from an equal copy (which it adopts, so that the next call
    is an identity check again).

    Two generations of plain dicts, like the estimate cache: new and re-used entries go to `young`;
    when `young` reaches half of a bound it becomes `old` and the previous `old` is dropped. Entries
    are immutable tuples replaced whole, so a reader on another thread never sees a half-written
    entry. `max_tokens` bounds the text the remembered fields keep alive (about 4 characters each).
    """

    def __init__(
        self, max_entries: int = MESSAGE_MEMO_MAX_ENTRIES, max_tokens: int = MESSAGE_MEMO_MAX_TOKENS
    ) -> None:
        self.max_entries = max_entries
        self.max_tokens = max_tokens
        self.young: dict[Hashable, Entry] = {}
        self.old: dict[Hashable, Entry] = {}
        self.young_tokens = 0
        self.misses = 0
        self._lock = threading.Lock()
        # Message class -> its fields getter, filled on first sight of a class (`issubclass` is slow
        # on pydantic models), read directly by `total`.
        self.getters: dict[type, FieldsGetter] = {}
        # A thread's key (`_request_key`) -> the lists counted under it (`total`); their tokens
        # count towards half of `max_tokens` (they keep the same texts alive as the entries do).
        self.requests: dict[Hashable, Requests] = {}
        self.requests_tokens = 0

    def __len__(self) -> int:
        return len(self.young) + len(self.old)

    def total(
        self,
        messages: Sequence[BaseMessage],
        count_messages: CountMessages[_Context],
        context: _Context,
    ) -> int:
        """Sum of the counts of `messages`, each taken from the memo when its fields are unchanged;
        the others are counted by one call of `count_messages(those messages, their fields,
        context)` (one count per message, in order) and remembered now.

        A thread's list usually only grows from one call to the next, and a checkpoint reload
        brings it back in new objects: so the lists last counted are kept whole (`requests`, by the
        ids of the thread's first two messages) with their total, and a list that starts with one
        of them -- the same objects, or equal copies -- takes that total from one comparison of the
        two field lists, done in C; only its new messages are looked up one by one."""
        if not messages:
            return 0
        getter_of = self.getters.get
        fields = [(getter_of(m.__class__) or self._getter(m.__class__))(m) for m in messages]
        request_key = _request_key(messages)
        known = self.requests.get(request_key) or ()
        start, total, kept = 0, 0, known[:1]
        for slot, (known_fields, known_total) in enumerate(known):
            size = len(known_fields)
            if size <= len(fields) and fields[:size] == known_fields:
                start, total, kept = size, known_total, known[1 - slot : 2 - slot]  # the other slot
                break
        if start < len(fields):
            total += self._sum(messages, fields, start, count_messages, context)
        self._remember_request(request_key, ((fields, total), *kept), not known)
        return total

    def _remember_request(self, key: Hashable, entry: Requests, new_key: bool) -> None:
        """Keep `entry` under `key`: the list just counted, and the other list last counted under
        the same key (the L1 path alternates between the effective messages and their
        compacted view)."""
        total = sum(tokens for _, tokens in entry)
        if 2 * total > self.max_tokens:
            return  # too big to keep alive; the counts are still right, just not remembered whole
        with self._lock:
            previous = self.requests.get(key, ())
            growth = total - sum(tokens for _, tokens in previous)
            if (new_key and len(self.requests) >= REQUEST_RECORDS_MAX_ENTRIES) or (
                self.requests_tokens + growth > self.max_tokens // 2
            ):
                self.requests.clear()  # rebuilt by the next call of each thread
                self.requests_tokens, growth = 0, total
            self.requests_tokens += growth
            self.requests[key] = entry

    def _sum(
        self,
        messages: Sequence[BaseMessage],
        all_fields: list[tuple[Any, ...]],
        start: int,
        count_messages: CountMessages[_Context],
        context: _Context,
    ) -> int:
        """Sum of the counts of `messages[start:]` (their fields in `all_fields[start:]`). The
        young generation's latest slot is checked inline, the other slots after the loop; the
        messages found in none are counted in one call, so that a first sight of a thread pays one
        batch's fixed cost (`messages.count_new_messages`), not one per message."""
        recent, older = self.young.get, self.old.get
        total = 0
        pending: list[Unseen] = []  # under a key of the memo, not in its latest young slot
        # Under no key of the memo, as three parallel lists: a first sight allocates no tuple per
        # message beyond the ones the memo keeps (fewer runs of the cyclic garbage collector).
        new_keys: list[Hashable] = []
        new_messages: list[BaseMessage] = []
        new_fields: list[tuple[Any, ...]] = []
        copies: list[tuple[Hashable, Entry, Entry]] = []
        for index in range(start, len(messages)):
            message, fields = messages[index], all_fields[index]
            key: Hashable = message.id or id(message)
            entry = recent(key)
            if entry is not None and entry[1] == fields:  # identity checks when it is the same message
                total += entry[2]
                if entry[0] is not message:  # an equal copy (a checkpoint reload)
                    copies.append((key, entry, (message, fields, entry[2], entry[3], entry[4])))
            elif entry is None and older(key) is None:
                new_keys.append(key)
                new_messages.append(message)
                new_fields.append(fields)
            else:
                pending.append((key, message, fields))
        if copies:
            self._adopt_all(copies)
        for key, message, fields in pending:
            tokens = self.recall(key, message, fields)
            if tokens is None:
                new_keys.append(key)
                new_messages.append(message)
                new_fields.append(fields)
            else:
                total += tokens
        if new_keys:
            counts = count_messages(new_messages, new_fields, context)
            total += sum(counts)
            self._put_unseen(new_keys, new_messages, new_fields, counts)
        return total

    def _getter(self, message_class: type) -> FieldsGetter:
        getter = self.getters[message_class] = fields_getter(message_class)
        return getter

    def adopt(self, key: Hashable, message: BaseMessage, fields: tuple[Any, ...], entry: Entry) -> None:
        """`message` (with `fields`) equals the latest version in `entry` but is made of other
        objects (a checkpoint reload): keep these, so that the next call is identity checks again."""
        self._put(key, (message, fields, entry[2], entry[3], entry[4]))

    def _adopt_all(self, copies: list[tuple[Hashable, Entry, Entry]]) -> None:
        """`adopt` each (key, entry found, entry with the copy) of a reload under one lock: an entry
        still in place is swapped for one of the same size; one rotated or replaced meanwhile (by
        another thread) takes the general way."""
        with self._lock:
            young = self.young
            for key, found, replacement in copies:
                if young.get(key) is found:
                    young[key] = replacement
                else:
                    self._put_locked(key, replacement)

    def recall(self, key: Hashable, message: BaseMessage, fields: tuple[Any, ...]) -> int | None:
        """The count of `message` (whose fields are `fields`) found under `key` in either
        generation and either slot, or None."""
        entry = self.young.get(key) or self.old.get(key)
        if entry is not None:
            if entry[1] == fields:
                self.adopt(key, message, fields, entry)
                return entry[2]
            if entry[3] is not None and entry[3] == fields:  # the version before: swap the slots
                self._put(key, (message, fields, entry[4], entry[1], entry[2]))
                return entry[4]
        return None

    def count(
        self,
        key: Hashable,
        message: BaseMessage,
        fields: tuple[Any, ...],
        count_message: Callable[[BaseMessage, _Context], int],
        context: _Context,
    ) -> int:
        """`recall`, or `count_message(message, context)` remembered now."""
        tokens = self.recall(key, message, fields)
        if tokens is None:
            tokens = count_message(message, context)
            self._put_unseen([key], [message], [fields], [tokens])
        return tokens

    def _put_unseen(
        self,
        keys: Sequence[Hashable],
        messages: Sequence[BaseMessage],
        all_fields: Sequence[tuple[Any, ...]],
        counts: Sequence[int],
    ) -> None:
        """Remember the counts of messages found in no slot (`keys[i]`, `messages[i]`, their
        `all_fields[i]`, `counts[i]`), under one lock; a version found under the same key moves to
        the second slot. A count too big to keep alive is still right, just not remembered.

        A first sight of a thread (keys new to the memo, all different, room in the young
        generation) is stored in one `dict.update`."""
        added = sum(counts)
        with self._lock:
            self.misses += len(keys)
            young = self.young
            if (
                2 * (len(young) + len(keys)) <= self.max_entries
                and 2 * (self.young_tokens + added) <= self.max_tokens
                and young.keys().isdisjoint(keys)
                and self.old.keys().isdisjoint(keys)
                and len(dict.fromkeys(keys)) == len(keys)
            ):
                no_second_slot = repeat(None), repeat(0)
                entries = zip(messages, all_fields, counts, *no_second_slot, strict=False)
                young.update(zip(keys, entries, strict=False))
                self.young_tokens += added
                return
            for key, message, fields, tokens in zip(keys, messages, all_fields, counts, strict=True):
                if 2 * tokens > self.max_tokens:
                    continue
                entry = young.get(key) or self.old.get(key)
                if entry is None:
                    self._put_locked(key, (message, fields, tokens, None, 0))
                else:
                    self._put_locked(key, (message, fields, tokens, entry[1], entry[2]))
                young = self.young  # `_put_locked` may have rotated the generations

    def _put(self, key: Hashable, entry: Entry) -> None:
        with self._lock:
            self._put_locked(key, entry)

    def _put_locked(self, key: Hashable, entry: Entry) -> None:
        size = entry[2] + entry[4]  # both slots keep their fields alive
        current = self.young.get(key)
        if current is None:
            if (
                2 * (len(self.young) + 1) > self.max_entries
                or 2 * (self.young_tokens + size) > self.max_tokens
            ):
                self.old = self.young
                self.young, self.young_tokens = {}, 0
            self.young_tokens += size
        else:
            self.young_tokens += size - (current[2] + current[4])
        self.young[key] = entry

    def clear(self) -> None:
        with self._lock:
            self.young.clear()
            self.old.clear()
            self.young_tokens = 0
            self.requests.clear()
            self.requests_tokens = 0
