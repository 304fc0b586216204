"""Markdown of complete chat messages as sanitised HTML, for the page (issue 20, item 6).

Parsed by markdown-it-py (CommonMark with tables and strikethrough; raw HTML in the text is shown as
text, never interpreted) and then cleaned by nh3 against an allow-list: the page may insert the
result as HTML. Links keep only http, https and mailto targets and open in a new tab without the
opener; images are dropped (the page loads nothing from other origins), and so are inline styles
(the page's Content-Security-Policy refuses them; a table column's alignment is lost). Streaming text is never
rendered: the page shows it as plain text until the message is complete.
"""

from __future__ import annotations

from functools import cache
from typing import Final

import nh3
from markdown_it import MarkdownIt

#: The longest text rendered in one request (a message over it is shown as plain text).
MAX_RENDER_CHARS: Final = 200_000

_TAGS: Final = frozenset(
    {
        "p", "br", "hr", "strong", "em", "del", "s", "code", "pre", "blockquote",
        "ul", "ol", "li", "h1", "h2", "h3", "h4", "h5", "h6", "a",
        "table", "thead", "tbody", "tr", "th", "td",
    }
)  # fmt: skip
_ATTRIBUTES: Final = {
    "a": {"href", "title"},
    "ol": {"start"},
    "code": {"class"},
}
_URL_SCHEMES: Final = frozenset({"http", "https", "mailto"})


@cache
def _parser() -> MarkdownIt:
    # No `linkify` (a bare URL stays text) and `html` off: raw HTML is escaped before nh3 sees it.
    return MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])


def render_markdown(text: str) -> str:
    """`text` (Markdown) as HTML safe to insert into the page."""
    html = _parser().render(text)
    return nh3.clean(
        html,
        tags=set(_TAGS),
        attributes={tag: set(names) for tag, names in _ATTRIBUTES.items()},
        url_schemes=set(_URL_SCHEMES),
        link_rel="noopener noreferrer",
        set_tag_attribute_values={"a": {"target": "_blank"}},
    )
