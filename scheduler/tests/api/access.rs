//! Authentication and authorization over HTTP: every route × role, allowed and refused,
//! with the 401 and 403 JSON errors; tokens created, listed and revoked through the API.
//!
//! The expectations are written out here as the documentation states them
//! (docs/security.md), not derived from the rule table they test.

use axum::{body::Body, http::header};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Answer, NO_TOKEN, TestApp, hourly, id, request};

/// The roles under test, each with the token's apps.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Who {
    /// `admin` (every app).
    Admin,
    /// `operator` on app `a`.
    OperatorA,
    /// `reader` on app `a`.
    ReaderA,
    /// `operator` on app `b` (the jobs acted on are app `a`'s).
    OperatorB,
    /// `reader` on every app (`*`).
    ReaderAll,
}

const EVERYONE: [Who; 5] = [
    Who::Admin,
    Who::OperatorA,
    Who::ReaderA,
    Who::OperatorB,
    Who::ReaderAll,
];

/// What a route needs, as docs/security.md's table says.
#[derive(Debug, Clone, Copy)]
enum Needs {
    /// Any token.
    AnyRole,
    /// A reader or more, on app `a`.
    ReadA,
    /// An operator or more, on app `a`.
    OperateA,
    /// An admin.
    Admin,
}

fn allowed(who: Who, needs: Needs) -> bool {
    match needs {
        Needs::AnyRole => true,
        Needs::ReadA => who != Who::OperatorB,
        Needs::OperateA => matches!(who, Who::Admin | Who::OperatorA),
        Needs::Admin => who == Who::Admin,
    }
}

/// Creates the four scoped tokens as the bootstrap admin; returns their secrets.
async fn tokens(app: &TestApp) -> Vec<(Who, String)> {
    let mut out = vec![(Who::Admin, crate::support::ADMIN_TOKEN.to_string())];
    for (who, name, role, apps) in [
        (Who::OperatorA, "op-a", "operator", json!(["a"])),
        (Who::ReaderA, "read-a", "reader", json!(["a"])),
        (Who::OperatorB, "op-b", "operator", json!(["b"])),
        (Who::ReaderAll, "read-all", "reader", json!(["*"])),
    ] {
        let created = app
            .json(
                Method::POST,
                "/v1/tokens",
                &json!({"name": name, "role": role, "apps": apps}),
            )
            .await;
        assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
        out.push((who, created.body["token"].as_str().unwrap().to_string()));
    }
    out
}

async fn send_as(
    app: &TestApp,
    token: &str,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> Answer {
    let builder = request(method, path)
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json");
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    app.send(builder.body(body).unwrap()).await
}

/// A fresh job of app `a` (and a run of it), made by the admin.
async fn fresh_job(app: &TestApp, n: usize) -> (String, String) {
    let mut spec = hourly(&format!("job-{n}"));
    spec["app"] = json!("a");
    let job = app.create(&spec).await;
    let job_id = id(&job).to_string();
    let fired = app
        .call(Method::POST, &format!("/v1/jobs/{job_id}/trigger"))
        .await;
    assert_eq!(fired.status, StatusCode::ACCEPTED, "{}", fired.body);
    let run_id = fired.body["id"].as_str().unwrap().to_string();
    (job_id, run_id)
}

#[tokio::test]
async fn every_route_by_every_role_is_allowed_or_refused_as_documented() {
    let app = TestApp::new().await;
    let tokens = tokens(&app).await;
    let mut n = 0;
    let mut checked = 0;
    for (who, token) in &tokens {
        let (job, run) = fresh_job(&app, n).await;
        n += 1;
        let mut new_job = hourly(&format!("new-{n}"));
        new_job["app"] = json!("a");
        let routes: Vec<(Method, String, Option<Value>, Needs)> = vec![
            (Method::GET, "/v1/jobs?app=a".into(), None, Needs::ReadA),
            (Method::GET, format!("/v1/jobs/{job}"), None, Needs::ReadA),
            (
                Method::GET,
                format!("/v1/jobs/{job}/runs"),
                None,
                Needs::ReadA,
            ),
            (Method::GET, format!("/v1/runs/{run}"), None, Needs::ReadA),
            (Method::GET, "/v1/runs".into(), None, Needs::AnyRole),
            (Method::GET, "/v1/runs?app=a".into(), None, Needs::ReadA),
            // Run statistics: every role, counting its apps' runs; naming an app outside
            // them is refused.
            (Method::GET, "/v1/stats/runs".into(), None, Needs::AnyRole),
            (
                Method::GET,
                "/v1/stats/runs?app=a".into(),
                None,
                Needs::ReadA,
            ),
            (
                Method::GET,
                format!("/v1/runs?job={job}"),
                None,
                Needs::ReadA,
            ),
            (
                Method::GET,
                format!("/v1/jobs/{job}/preview"),
                None,
                Needs::ReadA,
            ),
            (
                Method::POST,
                "/v1/schedules/preview".into(),
                Some(json!({"schedule": {"every": "1h"}})),
                Needs::AnyRole,
            ),
            (
                Method::POST,
                "/v1/jobs".into(),
                Some(new_job.clone()),
                Needs::OperateA,
            ),
            (
                Method::POST,
                "/v1/jobs/batch".into(),
                Some(
                    json!({"jobs": [{"app": "a", "name": format!("batch-{n}"), "schedule": {"every": "1h"}, "target": {"group": "g"}}]}),
                ),
                Needs::OperateA,
            ),
            (
                Method::PATCH,
                format!("/v1/jobs/{job}"),
                Some(json!({"payload": {"n": 2}})),
                Needs::OperateA,
            ),
            (
                Method::POST,
                format!("/v1/jobs/{job}/pause"),
                None,
                Needs::OperateA,
            ),
            (
                Method::POST,
                format!("/v1/jobs/{job}/resume"),
                None,
                Needs::OperateA,
            ),
            (
                Method::POST,
                format!("/v1/jobs/{job}/trigger"),
                None,
                Needs::OperateA,
            ),
            (
                Method::POST,
                format!("/v1/jobs/{job}/backfill"),
                Some(json!({"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T03:00:00Z"})),
                Needs::OperateA,
            ),
            (Method::GET, "/v1/cluster".into(), None, Needs::AnyRole),
            // The audit trail: every role reads it, filtered to its apps; asking for an
            // app or a job's versions outside them is refused.
            (Method::GET, "/v1/audit".into(), None, Needs::AnyRole),
            (Method::GET, "/v1/audit?app=a".into(), None, Needs::ReadA),
            (
                Method::GET,
                format!("/v1/jobs/{job}/versions"),
                None,
                Needs::ReadA,
            ),
            // Every role may list; what each sees is narrowed to its apps' groups
            // (tests/api/consumers.rs).
            (Method::GET, "/v1/consumers".into(), None, Needs::AnyRole),
            (Method::GET, "/metrics".into(), None, Needs::AnyRole),
            (Method::GET, "/v1/openapi.json".into(), None, Needs::AnyRole),
            (Method::GET, "/v1/me".into(), None, Needs::AnyRole),
            (Method::GET, "/v1/tokens".into(), None, Needs::Admin),
            (
                Method::POST,
                "/v1/tokens".into(),
                Some(json!({"name": format!("t-{n}"), "role": "reader", "apps": ["a"]})),
                Needs::Admin,
            ),
            (
                Method::DELETE,
                "/v1/tokens/nobody".into(),
                None,
                Needs::Admin,
            ),
            (
                Method::POST,
                "/v1/dlq/chime.group.g.dlq/replay".into(),
                Some(json!({"job": "a/job-0"})),
                Needs::OperateA,
            ),
            (
                Method::POST,
                "/v1/dlq/chime.group.g.dlq/replay".into(),
                Some(json!({})),
                Needs::Admin,
            ),
            (
                Method::POST,
                "/v1/dlq/chime.group.g.dlq/purge".into(),
                None,
                Needs::Admin,
            ),
            (
                Method::POST,
                format!("/v1/runs/{run}/cancel"),
                None,
                Needs::OperateA,
            ),
            // Last: it deletes the job.
            (
                Method::DELETE,
                format!("/v1/jobs/{job}"),
                None,
                Needs::OperateA,
            ),
        ];
        for (method, path, body, needs) in routes {
            let answer = send_as(&app, token, method.clone(), &path, body.as_ref()).await;
            let what = format!("{who:?} {method} {path}: {} {}", answer.status, answer.body);
            if allowed(*who, needs) {
                assert!(
                    answer.status != StatusCode::UNAUTHORIZED
                        && answer.status != StatusCode::FORBIDDEN,
                    "allowed, but {what}"
                );
            } else {
                assert_eq!(answer.status, StatusCode::FORBIDDEN, "refused, but {what}");
                assert_eq!(answer.code(), "forbidden", "{what}");
                let message = answer.body["error"]["message"].as_str().unwrap_or_default();
                assert!(message.contains("token '"), "{what}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 5 * 34);
}

#[tokio::test]
async fn listings_and_peeks_show_only_the_callers_apps() {
    let app = TestApp::new().await;
    let tokens = tokens(&app).await;
    // Each job fired once, in this order: (app, job id).
    let mut fired = Vec::new();
    for (name, app_name) in [("x", "a"), ("y", "b"), ("z", "a")] {
        let mut spec = hourly(name);
        spec["app"] = json!(app_name);
        let job = id(&app.create(&spec).await).to_string();
        let trigger = app
            .call(Method::POST, &format!("/v1/jobs/{job}/trigger"))
            .await;
        assert_eq!(trigger.status, StatusCode::ACCEPTED, "{}", trigger.body);
        fired.push((app_name.to_string(), job));
        // Each trigger its own millisecond, so the order of fire times is this order.
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let names = |answer: &Answer| -> Vec<String> {
        answer.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| {
                format!(
                    "{}/{}",
                    j["app"].as_str().unwrap(),
                    j["name"].as_str().unwrap()
                )
            })
            .collect()
    };
    for (who, token) in &tokens {
        let listed = send_as(&app, token, Method::GET, "/v1/jobs", None).await;
        match who {
            Who::Admin | Who::ReaderAll => assert_eq!(names(&listed), ["a/x", "b/y", "a/z"]),
            Who::OperatorA | Who::ReaderA => assert_eq!(names(&listed), ["a/x", "a/z"]),
            Who::OperatorB => assert_eq!(names(&listed), ["b/y"]),
        }
        let other = send_as(&app, token, Method::GET, "/v1/jobs?app=b", None).await;
        let sees_b = matches!(who, Who::Admin | Who::ReaderAll | Who::OperatorB);
        assert_eq!(other.status.is_success(), sees_b, "{who:?}: {}", other.body);
        // Runs across jobs: only the caller's apps', and naming another app is refused.
        let runs = send_as(&app, token, Method::GET, "/v1/runs", None).await;
        let run_jobs: Vec<String> = runs.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["job_id"].as_str().unwrap().to_string())
            .collect();
        let expected: Vec<&String> = fired
            .iter()
            .rev()
            .filter(|(job_app, _)| match who {
                Who::Admin | Who::ReaderAll => true,
                Who::OperatorA | Who::ReaderA => job_app == "a",
                Who::OperatorB => job_app == "b",
            })
            .map(|(_, job)| job)
            .collect();
        assert_eq!(run_jobs.iter().collect::<Vec<_>>(), expected, "{who:?}");
        let other_runs = send_as(&app, token, Method::GET, "/v1/runs?app=b", None).await;
        assert_eq!(
            other_runs.status.is_success(),
            sees_b,
            "{who:?}: {}",
            other_runs.body
        );
    }
    assert_eq!(EVERYONE.len(), tokens.len());
}

#[tokio::test]
async fn requests_without_a_valid_token_get_401_and_health_checks_stay_open() {
    let app = TestApp::new().await;
    let anonymous = request(Method::GET, "/v1/jobs")
        .header(header::AUTHORIZATION, NO_TOKEN)
        .body(Body::empty())
        .unwrap();
    let answer = app.send(anonymous).await;
    answer.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    assert!(
        answer.headers[header::WWW_AUTHENTICATE]
            .to_str()
            .unwrap()
            .starts_with("Bearer")
    );
    for (header_value, why) in [
        ("Bearer chime_not_a_token", "an unknown token"),
        ("Basic dXNlcjpwYXNz", "another scheme"),
        ("Bearer", "no secret"),
    ] {
        let answer = app
            .send(
                request(Method::POST, "/v1/jobs")
                    .header(header::AUTHORIZATION, header_value)
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(Body::from(hourly("never").to_string()))
                    .unwrap(),
            )
            .await;
        answer.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
        assert!(
            !answer.body.to_string().contains("chime_not_a_token"),
            "{why}: the secret is echoed: {}",
            answer.body
        );
    }
    // Nothing was created by the refused requests.
    let listed = app.get("/v1/jobs").await;
    assert_eq!(listed.body["items"], json!([]));
    for open in ["/healthz", "/readyz"] {
        let answer = app
            .send(
                request(Method::GET, open)
                    .header(header::AUTHORIZATION, NO_TOKEN)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await;
        assert_ne!(answer.status, StatusCode::UNAUTHORIZED, "{open}");
    }
    let metrics = app
        .send(
            request(Method::GET, "/metrics")
                .header(header::AUTHORIZATION, NO_TOKEN)
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    metrics.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
}

#[tokio::test]
async fn tokens_are_shown_once_listed_without_secrets_and_revoked_at_once() {
    let app = TestApp::new().await;
    let created = app
        .json(
            Method::POST,
            "/v1/tokens",
            &json!({"name": "ci", "role": "operator", "apps": ["a", "b"]}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let secret = created.body["token"].as_str().unwrap().to_string();
    assert!(secret.starts_with("chime_"));
    assert_eq!(created.body["created_by"], "bootstrap");
    assert_eq!(created.body["apps"], json!(["a", "b"]));

    let listed = app.get("/v1/tokens").await;
    assert_eq!(listed.status, StatusCode::OK);
    assert!(
        !listed.body.to_string().contains(&secret[6..]),
        "{}",
        listed.body
    );
    assert_eq!(listed.body["items"][0]["name"], "ci");
    assert_eq!(listed.body["items"][0]["revoked_at"], Value::Null);

    let works = send_as(&app, &secret, Method::GET, "/v1/jobs?app=a", None).await;
    assert_eq!(works.status, StatusCode::OK);
    // The token describes itself: what a client may show it.
    let me = send_as(&app, &secret, Method::GET, "/v1/me", None).await;
    assert_eq!(me.status, StatusCode::OK, "{}", me.body);
    assert_eq!(
        (me.body["name"].as_str(), me.body["role"].as_str()),
        (Some("ci"), Some("operator"))
    );
    assert_eq!(me.body["apps"], json!(["a", "b"]));
    let actions: Vec<&str> = me.body["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(actions.contains(&"change_jobs") && actions.contains(&"trigger_jobs"));
    assert!(!actions.contains(&"purge_queue") && !actions.contains(&"manage_tokens"));
    assert!(!me.body.to_string().contains(&secret[6..]));
    // The same name again, a bad role, a bad name, no apps: refused, naming the field.
    for (body, status, field) in [
        (
            json!({"name": "ci", "role": "reader", "apps": ["a"]}),
            StatusCode::CONFLICT,
            "name",
        ),
        (
            json!({"name": "x", "role": "root", "apps": ["a"]}),
            StatusCode::BAD_REQUEST,
            "role",
        ),
        (
            json!({"name": "a b", "role": "reader", "apps": ["a"]}),
            StatusCode::BAD_REQUEST,
            "name",
        ),
        (
            json!({"name": "y", "role": "reader"}),
            StatusCode::BAD_REQUEST,
            "apps",
        ),
        (
            json!({"name": "bootstrap", "role": "reader", "apps": ["*"]}),
            StatusCode::CONFLICT,
            "name",
        ),
    ] {
        let answer = app.json(Method::POST, "/v1/tokens", &body).await;
        assert_eq!(
            (answer.status, answer.field()),
            (status, Some(field)),
            "{body}: {}",
            answer.body
        );
    }

    let revoked = app.call(Method::DELETE, "/v1/tokens/ci").await;
    assert_eq!(revoked.status, StatusCode::OK, "{}", revoked.body);
    assert!(revoked.body["revoked_at"].is_string());
    let refused = send_as(&app, &secret, Method::GET, "/v1/jobs?app=a", None).await;
    refused.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    // Revoking again answers the token as revoked the first time.
    let again = app.call(Method::DELETE, "/v1/tokens/ci").await;
    assert_eq!(again.body["revoked_at"], revoked.body["revoked_at"]);
    app.call(Method::DELETE, "/v1/tokens/nobody")
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
}
