//! `GET /v1/openapi.json`: the document is served to any valid token, and it describes
//! every route the router mounts (read from the router's own source, `src/api/mod.rs`,
//! and checked against the live router), and nothing it does not mount. A route added
//! without a `#[utoipa::path]` description fails here.

use std::collections::BTreeSet;

use chime_scheduler::api::{body::BATCH_PATH, openapi};
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::support::{NO_TOKEN, TestApp, request};

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// The (method, path) pairs the router mounts, read from `router()` in `src/api/mod.rs`:
/// each `.route(PATH, get(..).post(..))` call, its path a literal or one of the named
/// constants below.
fn routed() -> BTreeSet<(String, String)> {
    let source = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/api/mod.rs"))
        .expect("read src/api/mod.rs");
    let start = source.find("pub fn router(").expect("router() in mod.rs");
    let end = start + source[start..].find(".fallback(").expect("the fallback");
    let body = &source[start..end];
    let mut out = BTreeSet::new();
    for segment in body.split(".route(").skip(1) {
        let (first, rest) = segment
            .split_once(',')
            .expect("a route's path and handlers");
        let first = first.trim();
        let path = match first {
            literal if literal.starts_with('"') => literal.trim_matches('"').to_string(),
            "body::BATCH_PATH" => BATCH_PATH.to_string(),
            "openapi::PATH" => openapi::PATH.to_string(),
            other => panic!("route path {other:?}: name its value in this test's routed()"),
        };
        // A method router call: `get(`, `.post(`, `axum::routing::delete(`, never a
        // handler's name (`jobs::get)`).
        let mut methods = 0;
        for method in METHODS {
            let call = format!("{method}(");
            for (at, _) in rest.match_indices(&call) {
                let before = rest[..at].chars().next_back();
                if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                    out.insert((method.to_string(), path.clone()));
                    methods += 1;
                }
            }
        }
        assert!(methods > 0, "no method read for route {path}");
    }
    out
}

fn described(doc: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("a path item").keys() {
            if METHODS.contains(&method.as_str()) {
                out.insert((method.clone(), path.clone()));
            }
        }
    }
    out
}

/// A concrete path for a templated one.
fn concrete(path: &str) -> String {
    path.replace("{id}", "0190a6f1-8e41-7000-8000-000000000000")
        .replace("{queue}", "chime.group.g.dlq")
        .replace("{name}", "nobody")
}

#[tokio::test]
async fn every_routed_method_is_described_in_the_openapi_document_and_nothing_else() {
    let app = TestApp::new().await;
    let answer = app.get(openapi::PATH).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let doc = answer.body;
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")),
        "{}",
        doc["openapi"]
    );
    let routed = routed();
    assert!(
        routed.len() >= 28,
        "read only {} routes: {routed:?}",
        routed.len()
    );
    let described = described(&doc);
    let missing: Vec<_> = routed.difference(&described).collect();
    assert!(
        missing.is_empty(),
        "routed but not described (add #[utoipa::path] and list it in api/openapi.rs): {missing:?}"
    );
    let phantom: Vec<_> = described.difference(&routed).collect();
    assert!(phantom.is_empty(), "described but not routed: {phantom:?}");
    // What was read from the source is what the router answers: each pair reaches a
    // handler (not the 404 "no such route" or 405 fallbacks).
    for (method, path) in &routed {
        let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let answer = app
            .send(
                request(method.clone(), &concrete(path))
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
            .await;
        assert_ne!(
            answer.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}"
        );
        let message = answer.body["error"]["message"].as_str().unwrap_or_default();
        assert_ne!(message, "no such route", "{method} {path}");
    }
}

#[tokio::test]
async fn the_document_needs_a_token_and_describes_the_bearer_scheme_and_errors() {
    let app = TestApp::new().await;
    app.send(
        request(Method::GET, openapi::PATH)
            .header("authorization", NO_TOKEN)
            .body(axum::body::Body::empty())
            .unwrap(),
    )
    .await
    .assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    let doc = app.get(openapi::PATH).await.body;
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    // The health checks are open; everything under /v1 documents 401 and 403.
    assert_eq!(
        doc["paths"]["/healthz"]["get"]["security"],
        serde_json::json!([{}])
    );
    let create = &doc["paths"]["/v1/jobs"]["post"];
    for status in ["201", "400", "401", "403", "409", "413", "500", "503"] {
        assert!(
            create["responses"][status].is_object(),
            "createJob {status}"
        );
    }
    let error = &doc["components"]["schemas"]["ErrorDetail"];
    assert!(
        error["properties"]["code"].is_object() && error["properties"]["message"].is_object(),
        "{error}"
    );
    // Unsigned integers carry their real range, in formats every tool knows.
    let text = doc.to_string();
    assert!(
        !text.contains("\"u-int") && !text.contains("\"int32\""),
        "{text}"
    );
    let limit = &doc["components"]["schemas"]["ReplayRequest"]["properties"]["limit"];
    assert_eq!(
        (limit["minimum"].as_u64(), limit["maximum"].as_u64()),
        (Some(0), Some(u64::from(u32::MAX))),
        "{limit}"
    );
    // The stateful chain's links.
    let links = &create["responses"]["201"]["links"];
    for link in ["GetJob", "UpdateJob", "TriggerJob", "DeleteJob"] {
        assert!(links[link]["operationId"].is_string(), "{link}: {links}");
    }
}

#[tokio::test]
async fn a_created_job_and_its_triggered_run_match_their_documented_required_fields() {
    let app = TestApp::new().await;
    let doc = app.get(openapi::PATH).await.body;
    let job = app.create(&crate::support::hourly("described")).await;
    let trigger = app
        .call(
            Method::POST,
            &format!("/v1/jobs/{}/trigger", crate::support::id(&job)),
        )
        .await;
    assert_eq!(trigger.status, StatusCode::ACCEPTED, "{}", trigger.body);
    for (schema, value) in [("JobResponse", &job), ("RunResponse", &trigger.body)] {
        let required = required_fields(&doc, schema);
        assert!(!required.is_empty(), "{schema} lists no required field");
        for field in required {
            assert!(
                value.get(&field).is_some(),
                "{schema}.{field} missing from {value}"
            );
        }
    }
}

/// The required fields of a component schema, through `allOf` (flattened structs).
fn required_fields(doc: &Value, name: &str) -> Vec<String> {
    let schema = &doc["components"]["schemas"][name];
    let mut out = Vec::new();
    let mut parts = vec![schema.clone()];
    if let Some(all) = schema["allOf"].as_array() {
        parts.extend(all.iter().cloned());
    }
    for part in parts {
        let part = match part["$ref"].as_str() {
            Some(r) => doc["components"]["schemas"][r.rsplit('/').next().unwrap()].clone(),
            None => part,
        };
        if let Some(required) = part["required"].as_array() {
            out.extend(
                required
                    .iter()
                    .filter_map(|f| f.as_str().map(str::to_string)),
            );
        }
    }
    out
}
