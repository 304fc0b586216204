"""Reading and rebuilding message content, which is either a string or a list of content blocks."""

from __future__ import annotations

from typing import Any

TEXT_BLOCK_TYPES = frozenset({"text", "input_text", "output_text"})


def content_text(content: str | list[Any]) -> str:
    """The text of a message's content; non-text blocks (images, files) contribute nothing."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") in TEXT_BLOCK_TYPES:
            text = block.get("text")
            if isinstance(text, str):
                parts.append(text)
    return "\n".join(parts)


def non_text_blocks(content: str | list[Any]) -> list[Any]:
    if isinstance(content, str):
        return []
    return [
        block
        for block in content
        if not isinstance(block, str)
        and not (isinstance(block, dict) and block.get("type") in TEXT_BLOCK_TYPES)
    ]


def with_text(content: str | list[Any], text: str) -> str | list[Any]:
    """Content whose text is replaced by `text`, keeping any non-text blocks after it."""
    others = non_text_blocks(content)
    if not others:
        return text
    return [{"type": "text", "text": text}, *others]


#: Block types of a model's own reasoning and of tool calls (shown from `tool_calls`): not content
#: a reader of the conversation needs named.
UNNAMED_BLOCK_TYPES = frozenset(
    {
        "reasoning",
        "thinking",
        "redacted_thinking",
        "tool_use",
        "tool_call",
        "function_call",
        "tool_call_chunk",
    }
)
#: Provider spellings of the media kinds.
MEDIA_KIND_BY_TYPE = {
    "image_url": "image",
    "input_image": "image",
    "input_file": "file",
    "input_audio": "audio",
}
#: Objects in which providers nest a block's description (OpenAI `image_url` / `file` /
#: `input_audio`, Anthropic `source`, LangChain `extras` / `metadata`).
NESTED_KEYS = ("image_url", "file", "input_audio", "source", "extras", "metadata")
#: Where a block's bytes live, in the order a reader would look: a URL, a file name, a stored file.
LOCATION_KEYS = ("url", "file_url", "filename", "file_name", "name", "title", "file_id")
MIME_KEYS = ("mime_type", "media_type", "format")
INLINE_DATA_KEYS = ("base64", "data", "file_data")
PLACEHOLDER_VALUE_CHARS = 160


def _short_value(value: str) -> str:
    flat = " ".join(value.split()).replace("[", "(").replace("]", ")")
    return flat[:PLACEHOLDER_VALUE_CHARS] + ("…" if len(flat) > PLACEHOLDER_VALUE_CHARS else "")


def _block_fields(block: dict[str, Any]) -> dict[str, Any]:
    """The block's fields with its nested description merged in, the outer fields winning."""
    fields = {key: value for key, value in block.items() if key not in NESTED_KEYS}
    for key in NESTED_KEYS:
        nested = block.get(key)
        if isinstance(nested, dict):
            for name, value in nested.items():
                fields.setdefault(name, value)
        elif isinstance(nested, str):  # `{"image_url": "https://…"}`
            fields.setdefault("url", nested)
    return fields


def _data_url_mime(value: str) -> str:
    """The MIME type of a `data:<mime>;base64,…` URL ("" when it names none)."""
    return value[5:].split(",", 1)[0].split(";", 1)[0]


def block_placeholder(block: Any) -> str | None:
    """A short line naming a non-text content block and where it lives (URL, file name or id, MIME
    type); inline data is only said to be there, never copied. None for reasoning and tool-call
    blocks, which are not part of what was said."""
    if not isinstance(block, dict):
        return f"[{_short_value(type(block).__name__)}]"
    kind = str(block.get("type") or "block")
    if kind in UNNAMED_BLOCK_TYPES or kind in TEXT_BLOCK_TYPES:
        return None
    fields = _block_fields(block)
    strings = {key: value for key, value in fields.items() if isinstance(value, str) and value.strip()}
    inline = {key: value for key, value in strings.items() if value.startswith("data:")}
    inline.update({key: strings[key] for key in INLINE_DATA_KEYS if key in strings})
    if fields.get("source_type") == "id" and "id" in strings:  # LangChain 0.3 `{"source_type": "id"}`
        strings.setdefault("file_id", strings["id"])
    location = next(
        (
            ("file id " if key == "file_id" else "") + strings[key]
            for key in LOCATION_KEYS
            if key in strings and key not in inline
        ),
        None,
    )
    mime = next((strings[key] for key in MIME_KEYS if key in strings), None)
    if mime is None:
        mime = next((_data_url_mime(v) for v in inline.values() if v.startswith("data:")), None) or None
    parts = [_short_value(part) for part in (location, mime) if part]
    if inline and location is None:
        parts.append("inline data not shown")
    name = _short_value(MEDIA_KIND_BY_TYPE.get(kind, kind))
    return f"[{name}: {', '.join(parts)}]" if parts else f"[{name}]"
