"""chime-consumer: run the tasks the Chime scheduler fires, from Python.

.. code-block:: python

    from chime_consumer import Consumer, RetryableError, TaskContext

    consumer = Consumer("amqp://guest:guest@127.0.0.1:5672/%2f", "orders")

    @consumer.handler("close-expired-orders")
    async def close_orders(ctx: TaskContext) -> dict:
        closed = await close_older_than(ctx.payload["older_than_min"], key=ctx.idempotency_key)
        return {"closed": closed}

    consumer.run()  # until SIGTERM / Ctrl-C, then drains running handlers

The wire protocol lives in :mod:`chime_consumer.protocol`; ``docs/python.md`` in the
Chime repository is the guide.
"""

from .connection import tls_context
from .consumer import Consumer
from .context import TaskContext
from .errors import ConfigError, HandlerError, PermanentError, RetryableError
from .idempotency import IdempotencyError, IdempotencyStore, MemoryStore
from .logs import JsonFormatter
from .observer import Observer
from .protocol.messages import DeliveryMode, Failed, Progress, Succeeded, TaskError, TaskMessage
from .settings import default_instance_id
from .stats import Counters

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "Consumer",
    "Counters",
    "DeliveryMode",
    "Failed",
    "HandlerError",
    "IdempotencyError",
    "IdempotencyStore",
    "JsonFormatter",
    "MemoryStore",
    "Observer",
    "PermanentError",
    "Progress",
    "RetryableError",
    "Succeeded",
    "TaskContext",
    "TaskError",
    "TaskMessage",
    "__version__",
    "default_instance_id",
    "tls_context",
]
