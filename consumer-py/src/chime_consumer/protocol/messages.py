"""Message bodies that cross RabbitMQ, as JSON: the task the scheduler publishes, and the
replies a consumer or observer sends back (ack, result, heartbeat, presence, observe,
and batches of them). Mirrors ``consumer-lib/src/protocol/messages/`` field for field;
``docs/protocol.md`` is the contract.

Readers are as strict as the Rust side's ``serde``: a missing field or a value of the
wrong type makes the message malformed, unknown fields are ignored, and a ``v`` other
than :data:`PROTOCOL_VERSION` is refused rather than guessed at.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .times import format_instant, parse_instant

#: Version carried in every message's ``v`` field.
PROTOCOL_VERSION = 1

#: How often a consumer instance announces itself, in milliseconds.
PRESENCE_INTERVAL_MS = 5_000
#: How long an instance counts as live after its last presence message.
PRESENCE_TTL_MS = 3 * PRESENCE_INTERVAL_MS
#: Most patterns one observer may register.
MAX_OBSERVER_PATTERNS = 64
#: How often an observer repeats its registration while connected, in milliseconds.
OBSERVE_INTERVAL_MS = 10 * 60 * 1_000
#: How long a pattern stays registered after its observer last announced it.
OBSERVER_TTL_MS = 7 * 24 * 60 * 60 * 1_000
#: Largest handler output a result may carry, in bytes of compact JSON.
MAX_OUTPUT_BYTES = 1024 * 1024
#: Deepest nesting of a handler output (each array or object is one level; a scalar is 0).
MAX_OUTPUT_DEPTH = 100

_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1


class ProtocolError(ValueError):
    """A message body that could not be read."""


class MalformedMessage(ProtocolError):
    """The body is not JSON of the expected shape."""


class UnsupportedVersion(ProtocolError):
    """The body is well-formed but speaks another protocol version."""

    def __init__(self, found: int) -> None:
        super().__init__(
            f"unsupported protocol version {found} (this side speaks {PROTOCOL_VERSION})"
        )
        self.found = found


class DeliveryMode(str, Enum):
    """How a job's fires are delivered; decides where its tasks are routed."""

    GROUP = "group"
    """One instance of the target group runs each fire."""
    BROADCAST = "broadcast"
    """Every live instance subscribed to the group's broadcasts runs each fire."""
    ZONE = "zone"
    """One instance per zone runs each fire."""
    SHARDED = "sharded"
    """Each fire is split into ``shard_total`` items spread over the group's instances."""


# --- reading helpers -------------------------------------------------------------------


def _load(body: Union[bytes, str]) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise MalformedMessage(f"malformed message: {error}") from None


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise MalformedMessage(f"malformed message: {what} is not a JSON object")
    return value


def _required(obj: Mapping[str, Any], name: str) -> Any:
    if name not in obj:
        raise MalformedMessage(f"malformed message: missing field `{name}`")
    return obj[name]


def _int(obj: Mapping[str, Any], name: str, maximum: int, optional: bool = False) -> Any:
    value = obj.get(name) if optional else _required(obj, name)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise MalformedMessage(
            f"malformed message: `{name}` must be an integer from 0 to {maximum}"
        )
    return value


def _str(obj: Mapping[str, Any], name: str, optional: bool = False) -> Any:
    value = obj.get(name) if optional else _required(obj, name)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise MalformedMessage(f"malformed message: `{name}` must be a string")
    return value


def _bool(obj: Mapping[str, Any], name: str, default: bool) -> bool:
    value = obj.get(name, default)
    if not isinstance(value, bool):
        raise MalformedMessage(f"malformed message: `{name}` must be true or false")
    return value


def _uuid(obj: Mapping[str, Any], name: str) -> uuid.UUID:
    text = _str(obj, name)
    try:
        return uuid.UUID(text)
    except ValueError:
        raise MalformedMessage(f"malformed message: `{name}` is not a UUID") from None


def _instant(obj: Mapping[str, Any], name: str) -> datetime:
    text = _str(obj, name)
    try:
        return parse_instant(text)
    except ValueError:
        raise MalformedMessage(
            f"malformed message: `{name}` is not an RFC 3339 instant"
        ) from None


def _version(obj: Mapping[str, Any]) -> int:
    return int(_int(obj, "v", _U32_MAX))


def _check_version(found: int) -> None:
    if found != PROTOCOL_VERSION:
        raise UnsupportedVersion(found)


def _dump(value: Mapping[str, Any]) -> bytes:
    """Compact JSON, UTF-8, and never NaN or infinity (they are not JSON)."""
    return _compact(value)


def _compact(value: Any) -> bytes:
    """Any JSON value as compact UTF-8 JSON, never NaN or infinity."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


# --- the task ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskMessage:
    """One task: a single fire of a job (one item of it), published by the scheduler.

    ``task_id`` is the run id and the idempotency key: every re-publish of the same
    fire carries the same ``task_id`` and a higher ``attempt``.
    """

    task_id: uuid.UUID
    job_id: uuid.UUID
    app: str
    job: str
    group: str
    fire_time: datetime
    shard: int
    shard_total: int
    attempt: int
    payload: Any
    published_at: datetime
    mode: DeliveryMode = DeliveryMode.GROUP
    zone: Optional[str] = None
    run_timeout_ms: Optional[int] = None
    v: int = PROTOCOL_VERSION

    @classmethod
    def from_json(cls, body: Union[bytes, str]) -> "TaskMessage":
        """Parses a task body and checks its version."""
        return cls.from_dict(_load(body))

    @classmethod
    def from_dict(cls, value: Any) -> "TaskMessage":
        """Reads a task from decoded JSON and checks its version."""
        obj = _object(value, "the task")
        mode_name = obj.get("mode")
        if mode_name is None:
            mode = DeliveryMode.GROUP
        else:
            try:
                mode = DeliveryMode(mode_name)
            except ValueError:
                raise MalformedMessage(
                    f"malformed message: unknown delivery mode {mode_name!r}"
                ) from None
        task = cls(
            v=_version(obj),
            task_id=_uuid(obj, "task_id"),
            job_id=_uuid(obj, "job_id"),
            app=_str(obj, "app"),
            job=_str(obj, "job"),
            group=_str(obj, "group"),
            fire_time=_instant(obj, "fire_time"),
            shard=_int(obj, "shard", _U32_MAX),
            shard_total=_int(obj, "shard_total", _U32_MAX),
            attempt=_int(obj, "attempt", _U32_MAX),
            mode=mode,
            zone=_str(obj, "zone", optional=True),
            payload=_required(obj, "payload"),
            published_at=_instant(obj, "published_at"),
            run_timeout_ms=_int(obj, "run_timeout_ms", _U64_MAX, optional=True),
        )
        _check_version(task.v)
        return task

    def to_dict(self) -> Dict[str, Any]:
        """The task as JSON-ready values, in the Rust side's field order."""
        out: Dict[str, Any] = {
            "v": self.v,
            "task_id": str(self.task_id),
            "job_id": str(self.job_id),
            "app": self.app,
            "job": self.job,
            "group": self.group,
            "fire_time": format_instant(self.fire_time),
            "shard": self.shard,
            "shard_total": self.shard_total,
            "attempt": self.attempt,
        }
        if self.mode is not DeliveryMode.GROUP:
            out["mode"] = self.mode.value
        if self.zone is not None:
            out["zone"] = self.zone
        out["payload"] = self.payload
        out["published_at"] = format_instant(self.published_at)
        if self.run_timeout_ms is not None:
            out["run_timeout_ms"] = self.run_timeout_ms
        return out

    def to_json(self) -> bytes:
        """The task's JSON body."""
        return _dump(self.to_dict())


# --- outcomes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskError:
    """A handler failure as it travels on the wire."""

    message: str
    retryable: bool
    retry_after_ms: Optional[int] = None

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"message": self.message, "retryable": self.retryable}
        if self.retry_after_ms is not None:
            out["retry_after_ms"] = self.retry_after_ms
        return out

    @classmethod
    def from_dict(cls, value: Any) -> "TaskError":
        obj = _object(value, "`error`")
        retryable = obj.get("retryable")
        if not isinstance(retryable, bool):
            raise MalformedMessage("malformed message: `retryable` must be true or false")
        return cls(
            message=_str(obj, "message"),
            retryable=retryable,
            retry_after_ms=_int(obj, "retry_after_ms", _U64_MAX, optional=True),
        )


@dataclass(frozen=True)
class Succeeded:
    """The handler succeeded, with ``output`` (any JSON; ``None``: no output)."""

    output: Any = None

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"status": "succeeded"}
        if self.output is not None:
            out["output"] = self.output
        return out


@dataclass(frozen=True)
class Failed:
    """The handler failed."""

    error: TaskError

    def to_dict(self) -> Dict[str, Any]:
        return {"status": "failed", "error": self.error.to_dict()}


#: A handler's outcome, as reported and as recorded in idempotency stores.
TaskOutcome = Union[Succeeded, Failed]


def json_depth(value: Any) -> int:
    """How deeply ``value`` nests lists and dicts (0 for a scalar), without recursion."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Sequence[Any] = list(item.values())
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def within_limits(outcome: TaskOutcome) -> TaskOutcome:
    """The outcome as a result may carry it: a success whose output is over
    :data:`MAX_OUTPUT_BYTES` or nested deeper than :data:`MAX_OUTPUT_DEPTH` becomes a
    permanent failure saying so (the scheduler could not take it). Same as the Rust
    library's ``TaskOutcome::within_limits``."""
    if not isinstance(outcome, Succeeded) or outcome.output is None:
        return outcome
    depth = json_depth(outcome.output)
    if depth > MAX_OUTPUT_DEPTH:
        message = f"handler output is nested {depth} levels deep; the limit is {MAX_OUTPUT_DEPTH}"
    else:
        try:
            size = len(_compact(outcome.output))
        except (TypeError, ValueError) as error:
            return Failed(TaskError(f"handler output does not serialise: {error}", False))
        if size <= MAX_OUTPUT_BYTES:
            return outcome
        message = f"handler output is {size} bytes of JSON; the limit is {MAX_OUTPUT_BYTES}"
    return Failed(TaskError(message, False))


def outcome_from_dict(value: Any) -> TaskOutcome:
    """Reads an outcome (``{"status": ..., ...}``) from decoded JSON."""
    obj = _object(value, "the outcome")
    status = obj.get("status")
    if status == "succeeded":
        return Succeeded(output=obj.get("output"))
    if status == "failed":
        return Failed(error=TaskError.from_dict(_required(obj, "error")))
    raise MalformedMessage(f"malformed message: unknown status {status!r}")


@dataclass(frozen=True)
class Progress:
    """Progress a handler reports; shown on the run until the next report."""

    percent: Optional[float] = None
    note: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        if self.percent is not None:
            out["percent"] = float(self.percent)
        if self.note is not None:
            out["note"] = self.note
        return out

    @classmethod
    def from_dict(cls, value: Any) -> "Progress":
        obj = _object(value, "`progress`")
        percent = obj.get("percent")
        if percent is not None and (
            isinstance(percent, bool) or not isinstance(percent, (int, float))
        ):
            raise MalformedMessage("malformed message: `percent` must be a number")
        return cls(
            percent=None if percent is None else float(percent),
            note=_str(obj, "note", optional=True),
        )


# --- replies ----------------------------------------------------------------------------


@dataclass(frozen=True)
class AckMessage:
    """"I have the task and am about to run it." ``attempt`` is the task's, as delivered."""

    task_id: uuid.UUID
    attempt: int
    consumer: str
    acked_at: datetime
    v: int = PROTOCOL_VERSION

    def to_dict(self) -> Dict[str, Any]:
        return {
            "type": "ack",
            "v": self.v,
            "task_id": str(self.task_id),
            "attempt": self.attempt,
            "consumer": self.consumer,
            "acked_at": format_instant(self.acked_at),
        }


@dataclass(frozen=True)
class ResultMessage:
    """"The handler finished with this outcome." ``replayed`` marks an outcome re-sent
    from the idempotency store for a duplicate delivery."""

    task_id: uuid.UUID
    attempt: int
    consumer: str
    finished_at: datetime
    outcome: TaskOutcome
    replayed: bool = False
    v: int = PROTOCOL_VERSION

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {
            "type": "result",
            "v": self.v,
            "task_id": str(self.task_id),
            "attempt": self.attempt,
            "consumer": self.consumer,
            "finished_at": format_instant(self.finished_at),
        }
        if self.replayed:
            out["replayed"] = True
        out.update(self.outcome.to_dict())
        return out


@dataclass(frozen=True)
class HeartbeatMessage:
    """"I am still running this task", optionally with the handler's latest progress."""

    task_id: uuid.UUID
    attempt: int
    consumer: str
    at: datetime
    progress: Optional[Progress] = None
    v: int = PROTOCOL_VERSION

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {
            "type": "heartbeat",
            "v": self.v,
            "task_id": str(self.task_id),
            "attempt": self.attempt,
            "consumer": self.consumer,
            "at": format_instant(self.at),
        }
        if self.progress is not None:
            out["progress"] = self.progress.to_dict()
        return out


@dataclass(frozen=True)
class PresenceMessage:
    """"Instance ``instance`` of group ``group`` is alive", sent every
    :data:`PRESENCE_INTERVAL_MS`."""

    instance: str
    group: str
    at: datetime
    zone: Optional[str] = None
    broadcast: bool = False
    #: The consumer library and its version, ``name/version`` (optional).
    version: Optional[str] = None
    v: int = PROTOCOL_VERSION

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {
            "type": "presence",
            "v": self.v,
            "instance": self.instance,
            "group": self.group,
        }
        if self.zone is not None:
            out["zone"] = self.zone
        out["broadcast"] = self.broadcast
        if self.version is not None:
            out["version"] = self.version
        out["at"] = format_instant(self.at)
        return out


@dataclass(frozen=True)
class ObserveMessage:
    """"Observer ``observer`` has its queue bound to these patterns": its registration."""

    observer: str
    patterns: Tuple[str, ...]
    at: datetime
    v: int = PROTOCOL_VERSION

    def to_dict(self) -> Dict[str, Any]:
        return {
            "type": "observe",
            "v": self.v,
            "observer": self.observer,
            "patterns": list(self.patterns),
            "at": format_instant(self.at),
        }


#: A message a consumer or observer sends on the reply exchange.
Reply = Union[AckMessage, ResultMessage, HeartbeatMessage, PresenceMessage, ObserveMessage]


def reply_to_json(reply: Reply) -> bytes:
    """The reply's JSON body."""
    return _dump(reply.to_dict())


def reply_from_dict(value: Any) -> Reply:
    """Reads one reply (never a batch) from decoded JSON and checks its version."""
    obj = _object(value, "the reply")
    kind = obj.get("type")
    reply: Reply
    if kind == "ack":
        reply = AckMessage(
            v=_version(obj),
            task_id=_uuid(obj, "task_id"),
            attempt=_int(obj, "attempt", _U32_MAX),
            consumer=_str(obj, "consumer"),
            acked_at=_instant(obj, "acked_at"),
        )
    elif kind == "result":
        reply = ResultMessage(
            v=_version(obj),
            task_id=_uuid(obj, "task_id"),
            attempt=_int(obj, "attempt", _U32_MAX),
            consumer=_str(obj, "consumer"),
            finished_at=_instant(obj, "finished_at"),
            replayed=_bool(obj, "replayed", False),
            outcome=outcome_from_dict(obj),
        )
    elif kind == "heartbeat":
        progress = obj.get("progress")
        reply = HeartbeatMessage(
            v=_version(obj),
            task_id=_uuid(obj, "task_id"),
            attempt=_int(obj, "attempt", _U32_MAX),
            consumer=_str(obj, "consumer"),
            at=_instant(obj, "at"),
            progress=None if progress is None else Progress.from_dict(progress),
        )
    elif kind == "presence":
        reply = PresenceMessage(
            v=_version(obj),
            instance=_str(obj, "instance"),
            group=_str(obj, "group"),
            zone=_str(obj, "zone", optional=True),
            broadcast=_bool(obj, "broadcast", False),
            version=_str(obj, "version", optional=True),
            at=_instant(obj, "at"),
        )
    elif kind == "observe":
        patterns = _required(obj, "patterns")
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            raise MalformedMessage("malformed message: `patterns` must be a list of strings")
        reply = ObserveMessage(
            v=_version(obj),
            observer=_str(obj, "observer"),
            patterns=tuple(patterns),
            at=_instant(obj, "at"),
        )
    else:
        raise MalformedMessage(f"malformed message: unknown reply type {kind!r}")
    _check_version(reply.v)
    return reply


def reply_from_json(body: Union[bytes, str]) -> Reply:
    """Parses one reply body and checks its version."""
    return reply_from_dict(_load(body))


def replies_from_json(body: Union[bytes, str]) -> List[Reply]:
    """Parses a reply message that holds one reply or a batch, checking every version;
    the replies come back in the order they were sent. A batch is judged whole."""
    value = _load(body)
    obj = _object(value, "the reply")
    if obj.get("type") != "batch":
        return [reply_from_dict(obj)]
    version = _version(obj)
    replies = _required(obj, "replies")
    if not isinstance(replies, list):
        raise MalformedMessage("malformed message: `replies` must be a list")
    parsed = []
    for item in replies:
        if isinstance(item, dict) and item.get("type") == "batch":
            raise MalformedMessage("malformed message: a batch inside a batch")
        parsed.append(reply_from_dict(item))
    _check_version(version)
    return parsed


def batch_body(replies: Sequence[bytes]) -> bytes:
    """The body of a batch of replies already serialised with :func:`reply_to_json`,
    without serialising them again: ``{"v":1,"type":"batch","replies":[...]}``."""
    return (
        b'{"v":%d,"type":"batch","replies":[' % PROTOCOL_VERSION + b",".join(replies) + b"]}"
    )


@dataclass(frozen=True)
class RecordedOutcome:
    """A finished task's outcome, as kept by an idempotency store."""

    outcome: TaskOutcome
    finished_at: datetime


def is_final(outcome: TaskOutcome) -> bool:
    """Whether an outcome belongs in an idempotency store: only a success is final for
    the handler's effects; a failed run may be replayed after a fix and must run again."""
    return isinstance(outcome, Succeeded)
