"""Errors with an HTTP meaning. Services raise them; `app.py` renders every one as the same JSON body:

{"error": {"code": "not_found", "message": "conversation not found", "details": …}}
"""

from __future__ import annotations

from typing import Any, Final

#: Codes of the service hardening (issue 19), used where the errors are raised.
MESSAGE_TOO_LARGE: Final = "message_too_large"
TOKEN_NOT_FOUND: Final = "token_not_found"
TOO_MANY_FAILED_AUTHENTICATIONS: Final = "too_many_failed_authentications"


class ServiceError(Exception):
    status_code = 400
    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = details

    def headers(self) -> dict[str, str]:
        """Headers the answer carries besides the JSON body."""
        return {}

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
            error["details"] = self.details
        return {"error": error}


class BadRequestError(ServiceError):
    status_code = 400
    code = "bad_request"


class UnauthorizedError(ServiceError):
    status_code = 401
    code = "unauthorized"


class NotFoundError(ServiceError):
    """Also the answer for another user's resources: their existence is not revealed."""

    status_code = 404
    code = "not_found"


class ConflictError(ServiceError):
    """The resource is in the wrong state (`thread_busy`, `run_not_waiting`, …)."""

    status_code = 409
    code = "conflict"


class ForbiddenError(ServiceError):
    status_code = 403
    code = "forbidden"


class PayloadTooLargeError(ServiceError):
    status_code = 413
    code = "payload_too_large"


class TooManyRequestsError(ServiceError):
    """Answered with `Retry-After: <retry_after>` (seconds)."""

    status_code = 429
    code = "too_many_requests"

    def __init__(self, message: str, *, retry_after: int, code: str | None = None) -> None:
        super().__init__(message, code=code, details={"retry_after": retry_after})
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}
