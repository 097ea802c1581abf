//! Round trips and refusals of every message type.

use super::{outcome::json_depth, *};
use serde_json::json;

fn task() -> TaskMessage {
    TaskMessage {
        v: PROTOCOL_VERSION,
        task_id: Uuid::from_u128(1),
        job_id: Uuid::from_u128(2),
        app: "shop".into(),
        job: "close-orders".into(),
        group: "orders".into(),
        fire_time: "2026-11-21T10:00:00Z".parse().unwrap(),
        shard: 0,
        shard_total: 1,
        attempt: 1,
        mode: DeliveryMode::Group,
        zone: None,
        payload: json!({"older_than_min": 30}),
        published_at: "2026-11-21T10:00:00.004Z".parse().unwrap(),
        run_timeout_ms: Some(300_000),
    }
}

#[test]
fn task_round_trips() {
    let task = task();
    assert_eq!(TaskMessage::from_slice(&task.to_vec()).unwrap(), task);
}

#[test]
fn task_with_other_version_is_rejected() {
    let mut task = task();
    task.v = 2;
    let err = TaskMessage::from_slice(&task.to_vec()).unwrap_err();
    assert!(matches!(
        err,
        ProtocolError::UnsupportedVersion { found: 2 }
    ));
}

#[test]
fn garbage_is_malformed() {
    assert!(matches!(
        TaskMessage::from_slice(b"not json"),
        Err(ProtocolError::Malformed(_))
    ));
    assert!(matches!(
        Reply::from_slice(br#"{"type":"ack","v":1}"#),
        Err(ProtocolError::Malformed(_))
    ));
}

#[test]
fn result_wire_shape_is_flat() {
    let reply = Reply::Result(ResultMessage {
        v: 1,
        task_id: Uuid::from_u128(1),
        attempt: 2,
        consumer: "host-1".into(),
        finished_at: "2026-11-21T10:00:01Z".parse().unwrap(),
        replayed: false,
        outcome: TaskOutcome::Failed {
            error: TaskError {
                message: "db down".into(),
                retryable: true,
                retry_after_ms: Some(5000),
            },
        },
    });
    let value: Value = serde_json::from_slice(&reply.to_vec()).unwrap();
    assert_eq!(
        value,
        json!({
            "type": "result", "v": 1, "task_id": Uuid::from_u128(1), "attempt": 2,
            "consumer": "host-1", "finished_at": "2026-11-21T10:00:01.000Z",
            "status": "failed",
            "error": {"message": "db down", "retryable": true, "retry_after_ms": 5000}
        })
    );
    assert_eq!(Reply::from_slice(&reply.to_vec()).unwrap(), reply);
}

#[test]
fn heartbeat_wire_shape() {
    let body = json!({
        "type": "heartbeat", "v": 1, "task_id": Uuid::from_u128(7), "attempt": 2,
        "consumer": "py-worker-3", "at": "2026-11-21T10:00:05Z",
        "progress": {"percent": 40.0, "note": "page 4 of 10"}
    });
    let reply = Reply::from_slice(body.to_string().as_bytes()).unwrap();
    let Reply::Heartbeat(heartbeat) = &reply else {
        panic!("expected a heartbeat")
    };
    assert_eq!(heartbeat.progress.as_ref().unwrap().percent, Some(40.0));
    assert_eq!(reply.task_id(), Some(Uuid::from_u128(7)));
    let bare = json!({
        "type": "heartbeat", "v": 1, "task_id": Uuid::from_u128(7), "attempt": 1,
        "consumer": "c", "at": "2026-11-21T10:00:05Z"
    });
    assert!(Reply::from_slice(bare.to_string().as_bytes()).is_ok());
}

#[test]
fn mode_and_zone_travel_only_when_not_default() {
    let plain = serde_json::to_value(task()).unwrap();
    assert!(plain.get("mode").is_none() && plain.get("zone").is_none());
    let mut zoned = task();
    zoned.mode = DeliveryMode::Zone;
    zoned.zone = Some("dc1".into());
    let value = serde_json::to_value(&zoned).unwrap();
    assert_eq!(value["mode"], "zone");
    assert_eq!(value["zone"], "dc1");
    assert_eq!(TaskMessage::from_slice(&zoned.to_vec()).unwrap(), zoned);
    for mode in ["group", "broadcast", "zone", "sharded"] {
        assert_eq!(DeliveryMode::parse(mode).unwrap().as_str(), mode);
    }
}

#[test]
fn presence_wire_shape() {
    let body = json!({
        "type": "presence", "v": 1, "instance": "web-1", "group": "catalog",
        "zone": "dc1", "broadcast": true, "at": "2026-11-21T10:00:05Z"
    });
    let reply = Reply::from_slice(body.to_string().as_bytes()).unwrap();
    let Reply::Presence(presence) = &reply else {
        panic!("expected presence")
    };
    assert_eq!(presence.zone.as_deref(), Some("dc1"));
    assert!(presence.broadcast);
    assert_eq!(reply.task_id(), None);
}

#[test]
fn observe_wire_shape() {
    let body = json!({
        "type": "observe", "v": 1, "observer": "audit",
        "patterns": ["shop.*", "billing.#"], "at": "2026-11-21T10:00:05Z"
    });
    let reply = Reply::from_slice(body.to_string().as_bytes()).unwrap();
    let Reply::Observe(observe) = &reply else {
        panic!("expected observe")
    };
    assert_eq!(observe.observer, "audit");
    assert_eq!(observe.patterns, ["shop.*", "billing.#"]);
    assert_eq!(reply.task_id(), None);
    assert_eq!(Reply::from_slice(&reply.to_vec()).unwrap(), reply);
}

#[test]
fn task_without_run_timeout_still_parses() {
    let mut value = serde_json::to_value(task()).unwrap();
    value.as_object_mut().unwrap().remove("run_timeout_ms");
    let parsed = TaskMessage::from_slice(value.to_string().as_bytes()).unwrap();
    assert_eq!(parsed.run_timeout_ms, None);
}

#[test]
fn succeeded_result_parses_from_documented_json() {
    let body = json!({
        "type": "result", "v": 1, "task_id": Uuid::from_u128(7), "attempt": 1,
        "consumer": "py-worker-3", "finished_at": "2026-11-21T10:00:01.250Z",
        "status": "succeeded", "output": {"closed": 12}
    });
    let reply = Reply::from_slice(body.to_string().as_bytes()).unwrap();
    let Reply::Result(result) = reply else {
        panic!("expected a result")
    };
    assert_eq!(
        result.outcome,
        TaskOutcome::Succeeded {
            output: Some(json!({"closed": 12}))
        }
    );
    assert!(!result.replayed);
}

fn ack(n: u128) -> Reply {
    Reply::Ack(AckMessage {
        v: 1,
        task_id: Uuid::from_u128(n),
        attempt: 1,
        consumer: "c".into(),
        acked_at: "2026-11-21T10:00:00Z".parse().unwrap(),
    })
}

#[test]
fn a_batch_carries_replies_in_order_and_one_reply_parses_alone() {
    let replies = vec![ack(1), ack(2), ack(3)];
    let bodies: Vec<Vec<u8>> = replies.iter().map(Reply::to_vec).collect();
    let body = ReplyBatch::body_of(&bodies);
    assert_eq!(Reply::many_from_slice(&body).unwrap(), replies);
    // The hand-built body is what serde would write.
    let typed: ReplyBatch = serde_json::from_slice(&body).unwrap();
    assert_eq!(typed.kind, BatchKind::Batch);
    assert_eq!(serde_json::to_vec(&typed).unwrap(), body);
    assert_eq!(Reply::many_from_slice(&bodies[1]).unwrap(), vec![ack(2)]);
}

#[test]
fn batches_are_checked_whole() {
    let inner = ReplyBatch::body_of(&[ack(1).to_vec()]);
    let nested = ReplyBatch::body_of(&[ack(2).to_vec(), inner]);
    assert!(matches!(
        Reply::many_from_slice(&nested),
        Err(ProtocolError::Malformed(_))
    ));
    let mut old = serde_json::to_value(ack(3)).unwrap();
    old["v"] = json!(2);
    let mixed = ReplyBatch::body_of(&[ack(4).to_vec(), old.to_string().into_bytes()]);
    assert!(matches!(
        Reply::many_from_slice(&mixed),
        Err(ProtocolError::UnsupportedVersion { found: 2 })
    ));
    assert!(Reply::many_from_slice(b"[1, 2]").is_err());
    assert!(Reply::many_from_slice(br#"{"type": "batch", "v": 1}"#).is_err());
}

#[test]
fn batch_items_are_checked_one_by_one() {
    // An output nested 126 levels (too deep inside the batch as a whole, fine on its
    // own); one nested past serde_json's depth limit of 128, a missing field and
    // another version: each refused alone, the acks around them kept.
    let nested = |levels: usize| {
        format!(
            r#"{{"v":1,"type":"result","task_id":"{}","attempt":1,"consumer":"c","finished_at":"2026-11-21T10:00:00Z","status":"succeeded","output":{}1{}}}"#,
            Uuid::from_u128(9),
            "[".repeat(levels),
            "]".repeat(levels)
        )
        .into_bytes()
    };
    let missing = br#"{"v":1,"type":"ack","task_id":"00000000-0000-0000-0000-000000000005","attempt":1,"consumer":"c"}"#;
    let mut old = serde_json::to_value(ack(6)).unwrap();
    old["v"] = json!(2);
    let body = ReplyBatch::body_of(&[
        ack(1).to_vec(),
        nested(126),
        nested(200),
        missing.to_vec(),
        old.to_string().into_bytes(),
        ack(2).to_vec(),
    ]);
    assert!(
        Reply::many_from_slice(&body).is_err(),
        "parsed whole, the batch fails"
    );
    let items = Reply::items_from_slice(&body).unwrap();
    let ok: Vec<bool> = items.iter().map(|i| i.reply.is_ok()).collect();
    assert_eq!(ok, [true, true, false, false, false, true]);
    assert_eq!(items[0].reply.as_ref().unwrap(), &ack(1));
    assert_eq!(items[5].reply.as_ref().unwrap(), &ack(2));
    let error = |i: usize| items[i].reply.as_ref().unwrap_err().to_string();
    assert!(error(2).contains("recursion limit"), "{}", error(2));
    assert!(
        error(3).contains("missing field `acked_at`"),
        "{}",
        error(3)
    );
    assert!(error(4).contains("version 2"), "{}", error(4));
    assert_eq!(items[3].body, missing);
    // One reply alone is one item; a broken envelope fails whole.
    let one = Reply::items_from_slice(&ack(3).to_vec()).unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].reply.as_ref().unwrap(), &ack(3));
    assert!(Reply::items_from_slice(br#"{"type": "batch", "v": 1}"#).is_err());
    assert!(
        Reply::items_from_slice(b"not json").unwrap()[0]
            .reply
            .is_err()
    );
}

#[test]
fn outputs_over_the_limits_become_permanent_failures() {
    let nested = |levels: usize| {
        let mut value = json!(1);
        for _ in 0..levels {
            value = json!([value]);
        }
        value
    };
    assert_eq!(json_depth(&json!(1)), 0);
    assert_eq!(json_depth(&json!({"a": [1, {"b": 2}]})), 3);
    assert_eq!(json_depth(&nested(MAX_OUTPUT_DEPTH)), MAX_OUTPUT_DEPTH);
    let ok = TaskOutcome::Succeeded {
        output: Some(nested(MAX_OUTPUT_DEPTH)),
    };
    assert_eq!(ok.within_limits(), ok);
    let refused = |output: Value| match (TaskOutcome::Succeeded {
        output: Some(output),
    })
    .within_limits()
    {
        TaskOutcome::Failed { error } => {
            assert!(!error.retryable);
            error.message
        }
        other => panic!("not refused: {other:?}"),
    };
    assert!(refused(nested(126)).contains("nested 126 levels"));
    let big = json!("x".repeat(MAX_OUTPUT_BYTES));
    assert!(refused(big).contains("bytes of JSON"));
    let failed = TaskOutcome::Failed {
        error: TaskError {
            message: "x".into(),
            retryable: true,
            retry_after_ms: None,
        },
    };
    assert_eq!(failed.within_limits(), failed);
}

#[test]
fn every_instant_is_written_with_milliseconds() {
    let now: DateTime<Utc> = "2026-11-21T10:00:00.123456789Z".parse().unwrap();
    let replies = [
        Reply::Ack(AckMessage {
            v: 1,
            task_id: Uuid::nil(),
            attempt: 1,
            consumer: "c".into(),
            acked_at: now,
        }),
        Reply::Heartbeat(HeartbeatMessage {
            v: 1,
            task_id: Uuid::nil(),
            attempt: 1,
            consumer: "c".into(),
            at: now,
            progress: None,
        }),
    ];
    for reply in replies {
        let text = String::from_utf8(reply.to_vec()).unwrap();
        assert!(text.contains(r#""2026-11-21T10:00:00.123Z""#), "{text}");
        assert!(!text.contains("123456"), "{text}");
    }
}
