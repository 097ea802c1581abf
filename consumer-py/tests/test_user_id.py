"""The user a connection publishes as (``user_id``), derived from the AMQP URL with the
cases of ``consumer-lib/src/protocol/user_id.rs``, and the ``scheduler_user`` option."""

from __future__ import annotations

import pytest

from chime_consumer import ConfigError, Consumer
from chime_consumer.protocol.user_id import connection_user


def test_the_user_comes_from_the_url() -> None:
    assert connection_user("amqp://shop-app:s3cret@rabbit:5672/%2f") == "shop-app"
    assert connection_user("amqp://shop%40eu:pw@rabbit/prod") == "shop@eu"
    assert connection_user("amqp://rabbit") == "guest"
    # Beyond the Rust cases: an empty user name is the default, a user without password
    # is that user, and plain mechanisms keep the URL's user.
    assert connection_user("amqp://:pw@rabbit/%2f") == "guest"
    assert connection_user("amqps://shop-app@rabbit/%2f") == "shop-app"
    assert connection_user("amqp://shop-app:pw@rabbit/%2f?auth_mechanism=plain") == "shop-app"
    assert connection_user("amqp://shop-app:pw@rabbit/%2f?auth_mechanism=AMQPLAIN") == "shop-app"
    assert connection_user("amqp://shop-app:pw@rabbit/%2f?auth=PLAIN") == "shop-app"


def test_unknown_when_the_broker_decides_the_user() -> None:
    assert connection_user("amqps://rabbit/%2f?auth_mechanism=external") is None
    assert connection_user("not a url") is None
    # Beyond the Rust cases: any spelling of EXTERNAL or ANONYMOUS, aiormq's own
    # ``auth=external`` (the parameter the Python client reads), a mechanism lapin does
    # not parse, and a user name that is not UTF-8.
    assert connection_user("amqps://shop-app@rabbit/%2f?auth_mechanism=EXTERNAL") is None
    assert connection_user("amqp://rabbit/%2f?auth_mechanism=anonymous") is None
    assert connection_user("amqps://shop-app@rabbit/%2f?auth=external") is None
    assert connection_user("amqp://shop-app@rabbit/%2f?auth_mechanism=kerberos") is None
    assert connection_user("amqp://%FF:pw@rabbit/%2f") is None
    assert connection_user("http://shop-app:pw@rabbit/") is None


URL = "amqp://guest:guest@127.0.0.1:5672/%2f"


def test_scheduler_user_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHIME_SCHEDULER_USER", raising=False)
    assert Consumer(URL, "orders", instance="i-1").settings.scheduler_user is None
    monkeypatch.setenv("CHIME_SCHEDULER_USER", "chimed")
    assert Consumer(URL, "orders", instance="i-1").settings.scheduler_user == "chimed"
    explicit = Consumer(URL, "orders", instance="i-1", scheduler_user="sched-eu")
    assert explicit.settings.scheduler_user == "sched-eu"
    # Empty means unset, as in the Rust library.
    monkeypatch.setenv("CHIME_SCHEDULER_USER", "")
    assert Consumer(URL, "orders", instance="i-1").settings.scheduler_user is None
    with pytest.raises(ConfigError) as error:
        Consumer(URL, "orders", instance="i-1", scheduler_user="")
    assert error.value.option == "scheduler_user"
