"""No credential in any log line: query parameters that carry one, and bearer tokens, are redacted.

The API refuses tokens in query strings, but uvicorn's access log wrote the request line before
anyone refused it: `GET /api/me?token=cxp_… HTTP/1.1`. `RedactingFilter` sits on every handler
of the root logger and of uvicorn's loggers (installed when the app starts, after uvicorn set its
logging up) and rewrites each record before it is formatted: the values of credential-like query
parameters (`token`, `access_token`, `api_key`, …) and anything shaped like a ctxpress token or a
`Bearer` credential become `[REDACTED]`, in the message, its arguments and its traceback.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any, Final

REDACTED: Final = "[REDACTED]"
#: Query parameter names whose values are credentials (compared without case).
CREDENTIAL_PARAMETERS: Final = (
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "auth",
    "auth_token",
    "authorization",
    "api_key",
    "apikey",
    "api-key",
    "key",
    "secret",
    "client_secret",
    "password",
    "passwd",
    "session",
    "signature",
    "sig",
)
LOGGERS: Final = ("", "uvicorn", "uvicorn.error", "uvicorn.access")

_PARAMETER = re.compile(
    r"(?i)([?&;](?:" + "|".join(re.escape(name) for name in CREDENTIAL_PARAMETERS) + r")=)[^&;#\s\"']*"
)
_TOKEN = re.compile(r"cxp_[A-Za-z0-9_\-]{8,}")
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9_\-.~+/=]{8,}")


def redact(text: str) -> str:
    """`text` with credential-like query values, ctxpress tokens and bearer credentials replaced."""
    text = _PARAMETER.sub(lambda match: match.group(1) + REDACTED, text)
    text = _TOKEN.sub("cxp_" + REDACTED, text)
    return _BEARER.sub(lambda match: match.group(1) + REDACTED, text)


def _redacted(value: Any) -> Any:
    return redact(value) if isinstance(value, str) else value


class RedactingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        # Arguments one by one, so formatters that read them (uvicorn's access log) still find them.
        if isinstance(record.args, tuple):
            record.args = tuple(_redacted(value) for value in record.args)
        elif isinstance(record.args, Mapping):
            record.args = {key: _redacted(value) for key, value in record.args.items()}
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        try:
            message = record.getMessage()
        except Exception:  # a broken record is the formatter's to report
            return True
        if (clean := redact(message)) != message:  # a credential made of message and arguments together
            record.msg, record.args = clean, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True


def install_log_redaction() -> None:
    """Put one `RedactingFilter` on every handler of the root and uvicorn loggers (idempotent)."""
    for name in LOGGERS:
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(existing, RedactingFilter) for existing in handler.filters):
                handler.addFilter(RedactingFilter())
