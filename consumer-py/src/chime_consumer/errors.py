"""What a handler raises to say how it failed, and what the library raises for a
configuration it cannot run with.

A handler's outcome decides what the scheduler does next: returning is a success;
:class:`RetryableError` makes the run ``failed`` until its backoff (or ``retry_after``)
has passed, then it is published again; :class:`PermanentError` makes it ``dead`` at
once. Any other exception is a permanent failure too: retrying the same payload
through the same bug cannot help.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Optional, Union


class HandlerError(Exception):
    """Base of the failures a handler raises on purpose."""

    retryable = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = str(message)


class RetryableError(HandlerError):
    """Running the task again may succeed (a dependency was down, a lock was busy).

    ``retry_after`` (seconds or a ``timedelta``) replaces the job's backoff before the
    next attempt; the scheduler caps it at 24 hours.
    """

    retryable = True

    def __init__(
        self, message: str, retry_after: Union[float, timedelta, None] = None
    ) -> None:
        super().__init__(message)
        if isinstance(retry_after, timedelta):
            retry_after = retry_after.total_seconds()
        if retry_after is not None and not retry_after >= 0:
            raise ValueError("retry_after must be a non-negative number of seconds")
        self.retry_after: Optional[float] = retry_after

    @property
    def retry_after_ms(self) -> Optional[int]:
        """``retry_after`` in whole milliseconds, as it travels on the wire."""
        return None if self.retry_after is None else int(self.retry_after * 1000)


class PermanentError(HandlerError):
    """Running the task again will not help (bad payload, business rule violated)."""


class ConfigError(ValueError):
    """A consumer or observer option breaks a rule of the protocol or is out of range.

    ``option`` names it (``group``, ``instance``, ``zone``, ``job``, ``concurrency``,
    ``prefetch``, ``ssl_context``, ...).
    """

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"invalid {option}: {message}")
        self.option = option


NAME_RULE = "use 1-128 letters, digits, '-' or '_', starting with a letter or digit"
INSTANCE_RULE = "use 1-128 printable ASCII characters without spaces"
