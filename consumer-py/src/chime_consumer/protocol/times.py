"""RFC 3339 instants as the protocol writes them: UTC, ``Z``, and as few fraction digits
as the value needs (0, 3 or 6), like the Rust side's ``chrono`` serialisation.

Python 3.9's ``datetime.fromisoformat`` reads neither ``Z`` nor nine fraction digits,
so both directions are done here.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))$"
)


def parse_instant(text: str) -> datetime:
    """Reads an RFC 3339 instant into an aware UTC ``datetime``.

    Digits beyond microseconds are dropped (Python keeps microseconds). Raises
    ``ValueError`` for anything else.
    """
    match = _RFC3339.match(text)
    if match is None:
        raise ValueError(f"not an RFC 3339 instant: {text!r}")
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    fraction = (match.group(7) or "").ljust(6, "0")[:6]
    offset = timedelta(0)
    if match.group(9):
        offset = timedelta(hours=int(match.group(10)), minutes=int(match.group(11)))
        if match.group(9) == "-":
            offset = -offset
    # A leap second (:60) is read as the last microsecond of its minute.
    leap = second == 60
    local = datetime(
        year,
        month,
        day,
        hour,
        minute,
        59 if leap else second,
        999_999 if leap else int(fraction),
        tzinfo=timezone(offset),
    )
    return local.astimezone(timezone.utc)


def format_instant(at: datetime) -> str:
    """Writes an instant as the protocol does: RFC 3339 in UTC with a ``Z`` and exactly
    three fractional digits (milliseconds; finer digits are cut), as the Rust library's
    ``protocol::instant::format``.

    A naive ``datetime`` is refused: the protocol's instants are absolute.
    """
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError("instants must be timezone-aware")
    at = at.astimezone(timezone.utc)
    text = at.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{at.microsecond // 1000:03d}Z"


def utc_now() -> datetime:
    """The current instant, aware, in UTC."""
    return datetime.now(timezone.utc)


def unix_millis(at: datetime) -> int:
    """Milliseconds since the Unix epoch, rounded down like ``chrono``'s
    ``timestamp_millis`` (so an instant before 1970 is not rounded towards zero)."""
    delta = at - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
