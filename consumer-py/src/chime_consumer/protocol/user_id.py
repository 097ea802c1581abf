"""The ``user_id`` message property: which RabbitMQ user a connection publishes as.

RabbitMQ refuses (with a channel error) a message whose ``user_id`` is not its
connection's user, so a receiver can trust a present ``user_id``. ``chimed`` stamps its
tasks with it, and consumers and observers their replies (:func:`connection_user`);
``chimed`` checks replies' against ``reply_users``, consumers tasks' against their
``scheduler_user``. Mirrors ``consumer-lib/src/protocol/user_id.rs``.
"""

from __future__ import annotations

from typing import Optional
from urllib.parse import unquote

from yarl import URL

#: The user a URL without one logs in as (lapin's and aiormq's default alike).
DEFAULT_USER = "guest"

# SASL mechanisms with which the broker, not the URL, decides the user.
_BROKER_DECIDES = ("external", "anonymous")
# lapin's spelling of the mechanism, and the one aiormq reads (it knows plain and external).
_MECHANISM_PARAMS = ("auth_mechanism", "auth")
# The mechanisms lapin parses; any other value makes the URL invalid for the Rust library.
_LAPIN_MECHANISMS = ("amqplain", "anonymous", "external", "plain", "rabbit-cr-demo")


def connection_user(amqp_url: str) -> Optional[str]:
    """The user a connection to ``amqp_url`` logs in as (``guest`` when the URL names
    none), to set as the ``user_id`` of what it publishes. ``None`` when it cannot be
    known from the URL: a URL that does not parse, or ``auth_mechanism=external`` (the
    user then comes from the client certificate) or ``anonymous``, as in the Rust
    library; and likewise aiormq's own ``auth=external`` (any ``auth`` other than
    ``plain``)."""
    try:
        url = URL(amqp_url)
    except (TypeError, ValueError):
        return None
    if url.scheme not in ("amqp", "amqps") or not url.is_absolute():
        return None
    mechanism = url.query.get("auth_mechanism")
    if mechanism is not None:
        mechanism = mechanism.lower()
        if mechanism not in _LAPIN_MECHANISMS or mechanism in _BROKER_DECIDES:
            return None
    aiormq_mechanism = url.query.get("auth")
    if aiormq_mechanism is not None and aiormq_mechanism.lower() != "plain":
        return None
    raw = url.raw_user
    if not raw:
        return DEFAULT_USER
    try:
        return unquote(raw, errors="strict")
    except UnicodeDecodeError:
        return None
