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
