"""The one root of the library's errors: `except ctxpress.CtxpressError` catches every one of them.

Each error also keeps the built-in base its callers already catch (`ValueError` for a bad path or
tokenizer, `OSError` for a failed write, `RuntimeError` for two summarisers, LangChain's
`ModelError` for an empty stream), so this root adds a way to catch, and takes none away.
"""

from __future__ import annotations


class CtxpressError(Exception):
    """The root of every error ctxpress raises itself."""
