"""Errors with an HTTP meaning. Services raise them; `app.py` renders every one as the same JSON body:

{"error": {"code": "not_found", "message": "conversation not found", "details": …}}
"""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    status_code = 400
    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = details

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


class PayloadTooLargeError(ServiceError):
    status_code = 413
    code = "payload_too_large"
