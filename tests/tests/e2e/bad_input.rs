//! Bad input gets a clear JSON error naming the field, and changes nothing.

use std::time::Duration;

use chime_tests::{
    TestConsumer,
    api::{in_state, metric},
    wait,
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Setup, StoreKind, every_second};

fn job(overrides: Value) -> Value {
    let mut body = json!({"name": "n", "schedule": {"every": "1m"}, "target": {"group": "g"}});
    for (k, v) in overrides.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

fn assert_error(
    status: StatusCode,
    body: &Value,
    want_status: StatusCode,
    code: &str,
    field: Option<&str>,
) {
    assert_eq!(status, want_status, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(
        !body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .is_empty(),
        "{body}"
    );
    match field {
        Some(field) => assert_eq!(body["error"]["field"], field, "{body}"),
        None => assert!(body["error"]["field"].is_null(), "{body}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_request_is_a_clear_4xx_and_changes_nothing() {
    let s = Setup::with_env(StoreKind::Sqlite, &[("CHIME_PAYLOAD_LIMIT", "4KiB")]).await;
    let api = &s.chimed.api;
    let keep = api.create_job(job(json!({"name": "keep"}))).await;
    let id = keep["id"].as_str().unwrap();

    let bad = StatusCode::BAD_REQUEST;
    let cases: Vec<(Value, StatusCode, &str, Option<&str>)> = vec![
        (
            job(json!({"schedule": {"cron": "0 61 * * * *"}})),
            bad,
            "invalid_field",
            Some("schedule.cron"),
        ),
        (
            job(json!({"schedule": {"cron": "0 * * * * *", "timezone": "Mars/Olympus"}})),
            bad,
            "invalid_field",
            Some("schedule.timezone"),
        ),
        (
            job(json!({"schedule": {"every": "fast"}})),
            bad,
            "invalid_field",
            Some("schedule.every"),
        ),
        (
            job(json!({"schedule": {"every": "10ms"}})),
            bad,
            "invalid_field",
            Some("schedule.every"),
        ),
        (
            job(json!({"schedule": {"at": "tomorrow"}})),
            bad,
            "invalid_field",
            Some("schedule.at"),
        ),
        (
            job(json!({"schedule": {}})),
            bad,
            "invalid_field",
            Some("schedule"),
        ),
        (
            job(json!({"payload": "x".repeat(5000)})),
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            Some("payload"),
        ),
        (
            job(json!({"name": "keep"})),
            StatusCode::CONFLICT,
            "duplicate_name",
            Some("name"),
        ),
        (
            job(json!({"name": "has space"})),
            bad,
            "invalid_field",
            Some("name"),
        ),
        (
            job(json!({"colour": "blue"})),
            bad,
            "invalid_field",
            Some("colour"),
        ),
        (
            json!({"name": "n", "schedule": {"every": "1m"}}),
            bad,
            "invalid_field",
            Some("target"),
        ),
        (
            job(json!({"target": {"group": "g", "mode": "carrier-pigeon"}})),
            bad,
            "invalid_field",
            Some("target.mode"),
        ),
        (
            job(json!({"target": {"group": "g", "mode": "sharded", "shards": 0}})),
            bad,
            "invalid_field",
            Some("target.shards"),
        ),
        (
            job(json!({"target": {"group": "g", "mode": "sharded", "shards": 1025}})),
            bad,
            "invalid_field",
            Some("target.shards"),
        ),
        (
            job(json!({"target": {"group": "g", "mode": "sharded"}})),
            bad,
            "invalid_field",
            Some("target.shards"),
        ),
        (
            job(json!({"target": {"group": "g", "mode": "group", "shards": 4}})),
            bad,
            "invalid_field",
            Some("target.shards"),
        ),
        (
            job(json!({"target": {"group": "g", "mode": "zone", "zones": []}})),
            bad,
            "invalid_field",
            Some("target.zones"),
        ),
        (
            job(json!({"target": {"group": "g", "mode": "zone", "zones": ["dc1", "dc1"]}})),
            bad,
            "invalid_field",
            Some("target.zones"),
        ),
        (
            job(json!({"target": {"group": "g", "mode": "zone", "zones": ["dc 1"]}})),
            bad,
            "invalid_field",
            Some("target.zones[0]"),
        ),
        (
            job(json!({"target": {"group": "g", "mode": "broadcast", "zones": ["dc1"]}})),
            bad,
            "invalid_field",
            Some("target.zones"),
        ),
        (
            job(json!({"target": {"group": "g", "mode": "zone", "zone": "dc1"}})),
            bad,
            "invalid_field",
            Some("target.zone"),
        ),
        (
            job(json!({"misfire": "later"})),
            bad,
            "invalid_field",
            Some("misfire"),
        ),
        (
            job(json!({"ack_timeout": "2h"})),
            bad,
            "invalid_field",
            Some("ack_timeout"),
        ),
        (
            job(json!({"max_attempts": 0})),
            bad,
            "invalid_field",
            Some("max_attempts"),
        ),
    ];
    for (body, status, code, field) in cases {
        let (got, answer) = api.call(Method::POST, "/v1/jobs", Some(&body)).await;
        assert_error(got, &answer, status, code, field);
    }
    let (status, answer) = api
        .call_raw(Method::POST, "/v1/jobs", b"{\"name\": ".to_vec())
        .await;
    assert_error(status, &answer, bad, "invalid_json", None);
    // An oversized body is refused before it is read, so the answer must close the
    // connection; otherwise a client reusing it fails its next request.
    let oversized = reqwest::Client::new()
        .post(format!("{}/v1/jobs", api.base()))
        .bearer_auth(api.token().expect("the harness's token"))
        .header("content-type", "application/json")
        .body(vec![b' '; 200 * 1024])
        .send()
        .await
        .expect("chimed answers");
    assert_eq!(
        oversized
            .headers()
            .get("connection")
            .and_then(|v| v.to_str().ok()),
        Some("close")
    );
    let status = oversized.status();
    let answer: Value = oversized.json().await.expect("JSON error body");
    assert_error(
        status,
        &answer,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        None,
    );

    let (_, list) = api.call(Method::GET, "/v1/jobs", None).await;
    assert_eq!(
        list["items"].as_array().unwrap().len(),
        1,
        "no bad request created a job"
    );

    // A zone job without its own zone list runs where consumers are live: with none, a
    // manual trigger has nothing to fire.
    let nowhere = api
        .create_job(job(
            json!({"name": "nowhere", "target": {"group": "g", "mode": "zone"}}),
        ))
        .await;
    let nowhere_id = nowhere["id"].as_str().unwrap();
    let (status, answer) = api
        .call(
            Method::POST,
            &format!("/v1/jobs/{nowhere_id}/trigger"),
            None,
        )
        .await;
    assert_error(
        status,
        &answer,
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        None,
    );
    assert!(api.runs(nowhere_id).await.is_empty(), "no run was recorded");

    // Changes: wrong version, invalid values, unknown jobs.
    let path = format!("/v1/jobs/{id}");
    let (status, answer) = api
        .call(
            Method::PATCH,
            &path,
            Some(&json!({"version": 7, "payload": 1})),
        )
        .await;
    assert_error(
        status,
        &answer,
        StatusCode::CONFLICT,
        "version_conflict",
        Some("version"),
    );
    let (status, answer) = api
        .call_with(
            Method::PATCH,
            &path,
            Some(&json!({"payload": 1})),
            &[("If-Match", "\"3\"")],
        )
        .await;
    assert_error(
        status,
        &answer,
        StatusCode::CONFLICT,
        "version_conflict",
        Some("version"),
    );
    let (status, answer) = api
        .call(
            Method::PATCH,
            &path,
            Some(&json!({"schedule": {"cron": "nope"}})),
        )
        .await;
    assert_error(status, &answer, bad, "invalid_field", Some("schedule.cron"));
    let (status, answer) = api
        .call(Method::PATCH, &path, Some(&json!({"shape": "round"})))
        .await;
    assert_error(status, &answer, bad, "invalid_field", Some("shape"));
    assert_eq!(
        api.job(id).await,
        keep,
        "failed changes left the job as it was"
    );

    let (status, changed) = api
        .call_with(
            Method::PATCH,
            &path,
            Some(&json!({"payload": {"v": 2}})),
            &[("If-Match", "\"1\"")],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(
        (changed["version"].clone(), changed["payload"].clone()),
        (json!(2), json!({"v": 2}))
    );
    assert_eq!(
        changed["next_fire_at"], keep["next_fire_at"],
        "a payload change keeps the schedule"
    );
    let mut edited = changed.clone();
    edited["payload"] = json!({"v": 3});
    let (status, round_trip) = api.call(Method::PATCH, &path, Some(&edited)).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "a job read with GET can be edited and sent back: {round_trip}"
    );
    assert_eq!(
        (round_trip["version"].clone(), round_trip["payload"].clone()),
        (json!(3), json!({"v": 3}))
    );
    let nul = job(json!({"name": "nul", "payload": {"s": "a\u{0}b"}}));
    let (status, answer) = api.call(Method::POST, "/v1/jobs", Some(&nul)).await;
    assert_error(status, &answer, bad, "invalid_field", Some("payload"));

    let ghost = uuid::Uuid::now_v7();
    for (method, path) in [
        (Method::GET, format!("/v1/jobs/{ghost}")),
        (Method::GET, "/v1/jobs/not-a-uuid".to_string()),
        (Method::DELETE, format!("/v1/jobs/{ghost}")),
        (Method::POST, format!("/v1/jobs/{ghost}/trigger")),
        (Method::GET, format!("/v1/jobs/{ghost}/runs")),
        (Method::GET, format!("/v1/runs/{ghost}")),
        (Method::GET, "/v1/nowhere".to_string()),
    ] {
        let (status, answer) = api.call(method, &path, None).await;
        assert_error(status, &answer, StatusCode::NOT_FOUND, "not_found", None);
    }
    let (status, answer) = api.call(Method::PUT, "/v1/jobs", None).await;
    assert_error(
        status,
        &answer,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        None,
    );
    let (status, answer) = api.call(Method::GET, "/v1/jobs?limit=0", None).await;
    assert_error(status, &answer, bad, "invalid_field", Some("limit"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_reply_queue_is_dead_lettered_and_counted() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let _consumer = TestConsumer::start(&s.vhost.amqp_url(), "workers", "w1", &[]).await;
    let job = s
        .chimed
        .api
        .create_job(every_second("tick", "workers", json!(null)))
        .await;
    let id = job["id"].as_str().unwrap().to_string();
    let succeeded = || async { in_state(&s.chimed.api.runs(&id).await, "succeeded").len() };
    wait::until("a first result", Duration::from_secs(20), || async {
        (succeeded().await >= 1).then_some(())
    })
    .await;

    let exchange = chime_consumer::protocol::topology::REPLY_EXCHANGE;
    s.vhost
        .publish(exchange, "reply", b"\x00\x01 not json")
        .await;
    s.vhost
        .publish(exchange, "reply", br#"{"type": "result", "v": 1}"#)
        .await;
    s.vhost.publish(exchange, "reply", br#"{"type": "ack", "v": 9, "task_id": "00000000-0000-0000-0000-000000000000", "attempt": 1, "consumer": "x", "acked_at": "2026-01-01T00:00:00Z"}"#).await;
    // A batch is judged whole: one that nests a batch, or holds a presence message naming
    // an unroutable zone, is dead-lettered; one about unknown tasks is simply applied.
    let ack = r#"{"type": "ack", "v": 1, "task_id": "00000000-0000-0000-0000-000000000000", "attempt": 1, "consumer": "x", "acked_at": "2026-01-01T00:00:00Z"}"#;
    let nested = format!(
        r#"{{"v": 1, "type": "batch", "replies": [{ack}, {{"v": 1, "type": "batch", "replies": []}}]}}"#
    );
    s.vhost.publish(exchange, "reply", nested.as_bytes()).await;
    let bad_zone = format!(
        r#"{{"v": 1, "type": "batch", "replies": [{ack}, {{"type": "presence", "v": 1, "instance": "i", "group": "workers", "zone": "a.b", "broadcast": false, "at": "2026-01-01T00:00:00Z"}}]}}"#
    );
    s.vhost
        .publish(exchange, "reply", bad_zone.as_bytes())
        .await;
    let harmless = format!(r#"{{"v": 1, "type": "batch", "replies": [{ack}, {ack}]}}"#);
    s.vhost
        .publish(exchange, "reply", harmless.as_bytes())
        .await;

    wait::until(
        "five malformed replies counted",
        Duration::from_secs(20),
        || async {
            let text = s.chimed.api.metrics().await;
            (metric(
                &text,
                "chime_malformed_messages_total{queue=\"chime.replies\"}",
            ) == 5.0)
                .then_some(())
        },
    )
    .await;
    wait::until("them in the reply DLQ", Duration::from_secs(10), || async {
        (s.vhost.queue_state("chime.replies.dlq").await.0 == 5).then_some(())
    })
    .await;
    let unknown = |text: &str| {
        metric(
            text,
            "chime_replies_total{kind=\"ack\",effect=\"unknown_run\"}",
        )
    };
    wait::until(
        "the harmless batch applied",
        Duration::from_secs(10),
        || async { (unknown(&s.chimed.api.metrics().await) >= 2.0).then_some(()) },
    )
    .await;
    let before = succeeded().await;
    wait::until(
        "results to keep flowing",
        Duration::from_secs(20),
        || async { (succeeded().await >= before + 2).then_some(()) },
    )
    .await;
}
