//! The API at the HTTP level, over a real listener: every error is the documented JSON
//! (including what the HTTP layer refuses before a handler runs), actions read or
//! refuse their body before acting, and slow or idle clients cannot hold connections.

use std::time::Duration;

use chime_tests::raw_http::{RawConnection, request};
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{Setup, StoreKind};

fn assert_json_error(status: u16, body: &Value, want: u16, code: &str) {
    assert_eq!(status, want, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_http_error_is_json() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let port = s.chimed.port();
    let job = s
        .chimed
        .api
        .create_job(json!({"name": "keep", "schedule": {"every": "1h"}, "target": {"group": "g"}}))
        .await;
    let id = job["id"].as_str().unwrap();

    let many_headers: String = (0..150).map(|i| format!("x-h{i}: v\r\n")).collect();
    let big_header = format!("x-big: {}\r\n", "a".repeat(70 * 1024));
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "invalid UTF-8 in a path segment",
            request("GET", "/v1/jobs/%FF%FE", None),
            400,
            "invalid_field",
        ),
        (
            "invalid UTF-8 in a DLQ name",
            request("POST", "/v1/dlq/chime.%C3.dlq/purge", None),
            400,
            "invalid_field",
        ),
        (
            "a DLQ name longer than any queue name",
            request("GET", &format!("/v1/dlq/chime.group.{}.dlq/messages", "g".repeat(300)), None),
            400,
            "invalid_field",
        ),
        (
            "too many headers",
            format!("GET /v1/jobs HTTP/1.1\r\nhost: c\r\n{many_headers}\r\n").into_bytes(),
            431,
            "headers_too_large",
        ),
        (
            "headers too large",
            format!("GET /v1/jobs HTTP/1.1\r\nhost: c\r\n{big_header}\r\n").into_bytes(),
            431,
            "headers_too_large",
        ),
        (
            "a control character in a header value",
            b"GET /v1/jobs HTTP/1.1\r\nhost: c\r\nx-bad: a\x01b\r\n\r\n".to_vec(),
            400,
            "bad_request",
        ),
        (
            "a header name with a space",
            b"GET /v1/jobs HTTP/1.1\r\nhost: c\r\nbad name: x\r\n\r\n".to_vec(),
            400,
            "bad_request",
        ),
        (
            "a garbage request line",
            b"\x01\x02 nonsense\r\n\r\n".to_vec(),
            400,
            "bad_request",
        ),
        (
            "a non-UTF-8 If-Match",
            [
                format!("PATCH /v1/jobs/{id} HTTP/1.1\r\nhost: c\r\nif-match: \"").into_bytes(),
                b"\xff\"\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}".to_vec(),
            ]
            .concat(),
            400,
            "invalid_field",
        ),
        (
            "a non-ASCII Content-Type",
            b"POST /v1/jobs HTTP/1.1\r\nhost: c\r\ncontent-type: \xe9\r\ncontent-length: 2\r\n\r\n{}".to_vec(),
            415,
            "unsupported_media_type",
        ),
        (
            "an unknown route",
            request("GET", "/v2/everything", None),
            404,
            "not_found",
        ),
        (
            "a wrong method",
            request("DELETE", "/v1/jobs", None),
            405,
            "method_not_allowed",
        ),
        (
            "bad JSON",
            request("POST", "/v1/jobs", Some("{\"name\": ")),
            400,
            "invalid_json",
        ),
        (
            "a form body",
            b"POST /v1/jobs HTTP/1.1\r\nhost: c\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: 6\r\n\r\nname=x".to_vec(),
            415,
            "unsupported_media_type",
        ),
        (
            "a body too large",
            format!(
                "POST /v1/jobs HTTP/1.1\r\nhost: c\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{}",
                1024 * 1024,
                " ".repeat(1024 * 1024)
            )
            .into_bytes(),
            413,
            "payload_too_large",
        ),
        (
            "a schedule that can never fire",
            request(
                "POST",
                "/v1/jobs",
                Some(r#"{"name": "never", "schedule": {"cron": "0 0 0 30 2 *"}, "target": {"group": "g"}}"#),
            ),
            400,
            "invalid_field",
        ),
        (
            "a cron whose years are past",
            request(
                "PATCH",
                &format!("/v1/jobs/{id}"),
                Some(r#"{"schedule": {"cron": "0 0 0 * * * 2020-2024"}}"#),
            ),
            400,
            "invalid_field",
        ),
    ];
    for (what, bytes, status, code) in cases {
        let mut connection = RawConnection::open_with_token(port, s.chimed.token()).await;
        let answer = connection.exchange(&bytes).await;
        assert_eq!(
            answer.header("content-type"),
            Some("application/json"),
            "{what}: {answer:?}"
        );
        assert_json_error(answer.status, &answer.json, status, code);
        if code == "invalid_field" && what.contains("UTF-8 in a") {
            assert_eq!(answer.json["error"]["field"], "path", "{what}");
        }
        if what.contains("never fire") || what.contains("years are past") {
            assert_eq!(answer.json["error"]["field"], "schedule.cron", "{what}");
        }
    }
    let (_, list) = s.chimed.api.call(Method::GET, "/v1/jobs", None).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(s.chimed.api.job(id).await, job, "no error changed the job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_read_or_refuse_their_body_before_acting() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let api = &s.chimed.api;
    let job = api
        .create_job(json!({"name": "acted", "schedule": {"every": "1h"}, "target": {"group": "g"}}))
        .await;
    let id = job["id"].as_str().unwrap();
    // Everything on one connection: an answer followed by a reset would fail the next
    // exchange.
    let mut connection = RawConnection::open_with_token(s.chimed.port(), s.chimed.token()).await;
    for action in ["pause", "resume", "trigger"] {
        let path = format!("/v1/jobs/{id}/{action}");
        for refused in [r#"{"force": true}"#, "[]", "\"now\"", "{"] {
            let answer = connection
                .exchange(&request("POST", &path, Some(refused)))
                .await;
            assert_eq!(answer.status, 400, "{action} {refused}: {answer:?}");
            assert!(
                matches!(
                    answer.json["error"]["code"].as_str(),
                    Some("invalid_field" | "invalid_json")
                ),
                "{answer:?}"
            );
        }
        assert_eq!(api.job(id).await["paused"], json!(false), "nothing acted");
        assert!(api.runs(id).await.is_empty(), "nothing triggered");
    }
    let paused = connection
        .exchange(&request(
            "POST",
            &format!("/v1/jobs/{id}/pause"),
            Some("{}"),
        ))
        .await;
    assert_eq!((paused.status, &paused.json["paused"]), (200, &json!(true)));
    let resumed = connection
        .exchange(&request(
            "POST",
            &format!("/v1/jobs/{id}/resume"),
            Some("  "),
        ))
        .await;
    assert_eq!(
        (resumed.status, &resumed.json["paused"]),
        (200, &json!(false))
    );
    let triggered = connection
        .exchange(&request(
            "POST",
            &format!("/v1/jobs/{id}/trigger"),
            Some("{}"),
        ))
        .await;
    assert_eq!(triggered.status, 202, "{triggered:?}");
    let plain = connection
        .exchange(&request("POST", &format!("/v1/jobs/{id}/trigger"), None))
        .await;
    assert_eq!(plain.status, 202, "{plain:?}");
    assert_eq!(api.runs(id).await.len(), 2, "one run per accepted trigger");
    // A body no handler reads (a GET's), or one refused before it was looked at, is
    // still read whole: the connection goes on serving.
    let listed = connection
        .exchange(&request("GET", "/v1/jobs", Some(&" ".repeat(50_000))))
        .await;
    assert_eq!(listed.status, 200, "{listed:?}");
    let form = connection
        .exchange(
            format!(
                "POST /v1/jobs HTTP/1.1\r\nhost: c\r\ncontent-type: text/plain\r\ncontent-length: 50000\r\n\r\n{}",
                "x".repeat(50_000)
            )
            .as_bytes(),
        )
        .await;
    assert_eq!(form.status, 415, "{form:?}");
    let again = connection
        .exchange(&request("GET", &format!("/v1/jobs/{id}"), None))
        .await;
    assert_eq!(again.status, 200, "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_closed_and_connections_are_limited() {
    let s = Setup::with_env(
        StoreKind::Sqlite,
        &[
            ("CHIME_HTTP_HEADER_TIMEOUT", "2s"),
            ("CHIME_HTTP_MAX_CONNECTIONS", "64"),
        ],
    )
    .await;
    let port = s.chimed.port();
    // 200 clients that start a request and never finish its headers, 100 that send
    // nothing and one that stops after a first answer (idle keep-alive).
    let mut slow = Vec::new();
    for i in 0..300 {
        let mut connection = RawConnection::open_with_token(port, s.chimed.token()).await;
        if i % 3 != 0 {
            connection
                .send(b"GET /v1/jobs HTTP/1.1\r\nhost: c\r\nx-slow: ")
                .await;
        }
        slow.push(connection);
    }
    let mut idle = RawConnection::open_with_token(port, s.chimed.token()).await;
    let first = idle.exchange(&request("GET", "/healthz", None)).await;
    assert_eq!(first.status, 200);
    // Generous bound: the timeout is 2 s, and the connections over the limit of 64 wait
    // their turn behind others that each time out.
    for (i, connection) in slow.iter_mut().enumerate() {
        assert!(
            connection.closed_within(Duration::from_secs(60)).await,
            "slow connection {i} was closed by chimed"
        );
    }
    assert!(
        idle.closed_within(Duration::from_secs(30)).await,
        "an idle keep-alive connection is closed"
    );
    let metrics = s.chimed.api.metrics().await;
    let closed = chime_tests::api::metric(
        &metrics,
        "chime_http_connections_closed_total{reason=\"header_timeout\"}",
    );
    assert!(closed >= 200.0, "{closed} closed for a late header");
    let (status, _) = s.chimed.api.call(Method::GET, "/v1/jobs", None).await;
    assert!(status.is_success(), "chimed still answers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_limit_wait_for_a_free_slot() {
    let s = Setup::with_env(
        StoreKind::Sqlite,
        &[
            ("CHIME_HTTP_HEADER_TIMEOUT", "10m"),
            ("CHIME_HTTP_MAX_CONNECTIONS", "2"),
        ],
    )
    .await;
    let port = s.chimed.port();
    // chimed's own readiness probe may still hold a slot; wait until both are ours.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut connection = RawConnection::open_with_token(port, s.chimed.token()).await;
        let answer = connection.exchange(&request("GET", "/healthz", None)).await;
        assert_eq!(answer.status, 200);
        held.push(connection);
    }
    let mut waiting = RawConnection::open_with_token(port, s.chimed.token()).await;
    waiting.send(&request("GET", "/healthz", None)).await;
    let answered = tokio::time::timeout(Duration::from_millis(1500), waiting.read_response()).await;
    assert!(
        answered.is_err(),
        "a third connection is not served while two are open: {answered:?}"
    );
    drop(held.pop());
    let answer = waiting.read_response().await;
    assert_eq!(answer.status, 200, "served once a slot is free");
}
