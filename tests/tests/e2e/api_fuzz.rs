//! The API fuzz test: a property-based client sends requests to every endpoint of
//! `docs/api.md` — wrong types, huge strings, unicode, NUL bytes, long names, bad
//! cursors and limits, deep JSON, big bodies, wrong methods and content types — to a
//! real `chimed`, and checks every answer: no 5xx but the documented 503 `unavailable`,
//! no dropped connection, every error the documented JSON with a code that matches its
//! status, and nothing changed by an answer that is an error.
//!
//! Cases come from proptest strategies driven by a seeded generator (the seed is
//! printed and read back from `CHIME_FUZZ_SEED`, so a failure can be replayed);
//! `CHIME_FUZZ_CASES` sets the number of requests per store (default 300: with both
//! stores about a minute here).

use std::collections::BTreeMap;

use proptest::{
    collection::{btree_map, vec},
    prelude::*,
    strategy::ValueTree,
    test_runner::{Config, RngAlgorithm, TestRng, TestRunner},
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Setup, StoreKind};

/// Every documented error code and its status.
const CODES: &[(&str, u16)] = &[
    ("bad_request", 400),
    ("invalid_json", 400),
    ("invalid_field", 400),
    ("unsupported", 400),
    ("unsupported_media_type", 415),
    ("payload_too_large", 413),
    ("uri_too_long", 414),
    ("headers_too_large", 431),
    ("not_found", 404),
    ("method_not_allowed", 405),
    ("duplicate_name", 409),
    ("version_conflict", 409),
    ("job_busy", 409),
    ("unavailable", 503),
];

/// One request.
#[derive(Debug, Clone)]
struct Case {
    method: Method,
    /// Path and query, already percent-encoded.
    target: String,
    content_type: Option<String>,
    if_match: Option<String>,
    body: Option<Vec<u8>>,
}

/// Route templates of docs/api.md with their documented method (the ones that change
/// state listed more than once, to be drawn more often).
const ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/jobs"),
    ("POST", "/v1/jobs"),
    ("POST", "/v1/jobs"),
    ("PATCH", "/v1/jobs/{id}"),
    ("POST", "/v1/jobs/{id}/trigger"),
    ("POST", "/v1/jobs/{id}/backfill"),
    ("GET", "/v1/jobs"),
    ("GET", "/v1/jobs/{id}"),
    ("PATCH", "/v1/jobs/{id}"),
    ("DELETE", "/v1/jobs/{id}"),
    ("POST", "/v1/jobs/{id}/pause"),
    ("POST", "/v1/jobs/{id}/resume"),
    ("POST", "/v1/jobs/{id}/trigger"),
    ("GET", "/v1/jobs/{id}/runs"),
    ("GET", "/v1/runs/{id}"),
    ("GET", "/v1/cluster"),
    ("GET", "/v1/dlq"),
    ("GET", "/v1/dlq/{queue}/messages"),
    ("POST", "/v1/dlq/{queue}/replay"),
    ("POST", "/v1/dlq/{queue}/purge"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("GET", "/v1/nowhere/{id}"),
];

/// A job's top-level fields (and one unknown), which the fuzzer replaces by anything.
const JOB_FIELDS: &[&str] = &[
    "name",
    "app",
    "schedule",
    "target",
    "payload",
    "ack_timeout",
    "max_attempts",
    "misfire",
    "catch_up_limit",
    "overlap",
    "paused",
    "backoff",
    "run_timeout",
    "extra",
];
/// Other field names of the API's bodies, used as object keys.
const OTHER_KEYS: &[&str] = &[
    "cron", "every", "at", "timezone", "group", "mode", "zones", "shards", "version", "job",
    "limit", "initial", "max", "from", "to", "rate", "dry_run",
];

/// Percent-encodes every byte outside the unreserved set.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Text of every kind: unicode, NUL, long, empty, names near the limits.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z][a-z0-9_-]{0,20}",
        "\\PC{0,40}",
        (1usize..3000).prop_map(|n| "n".repeat(n)),
        Just("a\u{0}b".to_string()),
        Just(String::new()),
        Just("ünïcødé-名前-🦀".to_string()),
        "[a-zA-Z0-9]{127,130}",
    ]
}

/// A path segment (percent-encoded): known ids, random uuids, garbage, bad escapes.
fn segment(ids: Vec<String>) -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(ids),
        1 => Just(uuid::Uuid::now_v7().to_string()),
        2 => text().prop_map(|t| encode(&t)),
        1 => Just("%00".to_string()),
        1 => Just("%FF%FE".to_string()),
        1 => Just("%C3".to_string()),
        2 => Just("chime.replies.dlq".to_string()),
        1 => Just("chime.group.fuzz.dlq".to_string()),
        1 => "[a-z]{1,300}".prop_map(|g| format!("chime.group.{g}.dlq")),
        1 => Just("..".to_string()),
    ]
}

fn query() -> impl Strategy<Value = String> {
    let limit = prop_oneof![
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("1001".to_string()),
        Just("10".to_string()),
        Just("99999999999999999999".to_string()),
        text(),
    ];
    let cursor = prop_oneof![
        text(),
        Just("0_00000000-0000-0000-0000-000000000000".to_string()),
        Just("-99999999999999_x".to_string()),
        Just("99999999999999999999_00000000-0000-0000-0000-000000000000".to_string()),
        Just(uuid::Uuid::nil().to_string()),
    ];
    (
        proptest::option::of(limit),
        proptest::option::of(cursor),
        proptest::option::of(text()),
    )
        .prop_map(|(limit, cursor, app)| {
            let mut parts = Vec::new();
            if let Some(limit) = limit {
                parts.push(format!("limit={}", encode(&limit)));
            }
            if let Some(cursor) = cursor {
                parts.push(format!("cursor={}", encode(&cursor)));
            }
            if let Some(app) = app {
                parts.push(format!("app={}", encode(&app)));
            }
            if parts.is_empty() {
                String::new()
            } else {
                format!("?{}", parts.join("&"))
            }
        })
}

/// Any JSON, with keys that are sometimes the API's own field names.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        text().prop_map(Value::String),
    ];
    let key = prop_oneof![
        proptest::sample::select(
            JOB_FIELDS
                .iter()
                .chain(OTHER_KEYS)
                .copied()
                .collect::<Vec<_>>()
        )
        .prop_map(str::to_string),
        text(),
    ];
    leaf.prop_recursive(4, 40, 6, move |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            btree_map(key.clone(), inner, 0..6)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// A valid job that never fires during the test (yearly or hourly from now).
fn valid_job(name: &str) -> Value {
    json!({"app": "fuzz", "name": name, "schedule": {"cron": "0 0 0 1 1 *"},
           "target": {"group": "fuzz"}, "payload": {"n": 1}, "ack_timeout": "25m"})
}

/// A job body with one field replaced by anything, or a valid one.
fn job_body() -> impl Strategy<Value = Value> {
    let field = proptest::sample::select(JOB_FIELDS.to_vec());
    (
        prop_oneof!["[a-z]{1,2}", "[a-z][a-z0-9-]{0,20}"],
        proptest::option::weighted(0.7, (field, json_value())),
    )
        .prop_map(|(name, change)| {
            let mut job = valid_job(&name);
            if let Some((field, value)) = change {
                job[field] = value;
            }
            job
        })
}

fn body() -> impl Strategy<Value = Option<Vec<u8>>> {
    let json = |v: Value| Some(v.to_string().into_bytes());
    prop_oneof![
        3 => Just(None),
        4 => job_body().prop_map(json),
        3 => json_value().prop_map(json),
        1 => Just(Some(b"{}".to_vec())),
        1 => (100usize..400).prop_map(|depth| Some(format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes())),
        1 => (100usize..400).prop_map(move |depth| json(json!({
            "name": "deep", "schedule": {"every": "1h"}, "target": {"group": "fuzz"},
            "payload": serde_json::from_str::<Value>(&format!("{}{}", "[".repeat(depth.min(120)), "]".repeat(depth.min(120)))).unwrap_or(Value::Null),
        }))),
        1 => vec(any::<u8>(), 0..200).prop_map(Some),
        1 => (5_000usize..300_000).prop_map(move |n| json(json!({"name": "big", "schedule": {"every": "1h"}, "target": {"group": "fuzz"}, "payload": "x".repeat(n)}))),
        1 => (json_value(), json_value()).prop_map(move |(job, limit)| json(json!({"job": job, "limit": limit}))),
    ]
}

fn case(ids: Vec<String>) -> impl Strategy<Value = Case> {
    let route = proptest::sample::select(ROUTES.to_vec());
    let method = prop_oneof![
        8 => Just(None),
        1 => proptest::sample::select(vec!["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]).prop_map(Some),
    ];
    let content_type = prop_oneof![
        6 => Just(Some("application/json".to_string())),
        1 => Just(None),
        1 => Just(Some("text/plain".to_string())),
        1 => Just(Some("application/x-www-form-urlencoded".to_string())),
        1 => "[ -~]{0,40}".prop_map(Some),
    ];
    let if_match = proptest::option::weighted(0.1, "[ -~]{0,20}");
    (
        route,
        method,
        segment(ids),
        query(),
        content_type,
        if_match,
        body(),
    )
        .prop_map(
            |((documented, template), method, segment, query, content_type, if_match, body)| {
                let path = template
                    .replace("{id}", &segment)
                    .replace("{queue}", &segment);
                let method = method.unwrap_or(documented);
                Case {
                    method: Method::from_bytes(method.as_bytes()).unwrap_or(Method::GET),
                    target: format!("{path}{query}"),
                    content_type,
                    if_match,
                    body,
                }
            },
        )
}

/// What an error must not change: the jobs, the runs of the job the path names, and
/// the dead-letter queues' depths.
async fn snapshot(http: &reqwest::Client, base: &str, job: Option<&str>, context: &str) -> Value {
    let get = |path: String| async move {
        let response = http
            .get(format!("{base}{path}"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("no answer to a snapshot read: {e:?}\nafter {context}"));
        response
            .json::<Value>()
            .await
            .expect("a JSON snapshot read")
    };
    let jobs = get("/v1/jobs?limit=1000".to_string()).await;
    let runs: Vec<Value> = match job {
        Some(id) => get(format!("/v1/jobs/{id}/runs?limit=1000"))
            .await
            .get("items")
            .and_then(Value::as_array)
            .map(|runs| {
                runs.iter()
                    .map(|r| json!([r["id"], r["fire_time"], r["trigger"]]))
                    .collect()
            })
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let dlq: BTreeMap<String, Value> = get("/v1/dlq".to_string())
        .await
        .get("items")
        .and_then(Value::as_array)
        .map(|queues| {
            queues
                .iter()
                .map(|q| (q["queue"].to_string(), q["depth"].clone()))
                .collect()
        })
        .unwrap_or_default();
    json!({"jobs": jobs["items"], "runs": runs, "dlq": dlq})
}

fn seed() -> u64 {
    std::env::var("CHIME_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand_seed)
}

fn rand_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    (nanos as u64) ^ u64::from(std::process::id())
}

crate::per_store!(fuzzed_requests_get_documented_answers_and_errors_change_nothing);

async fn fuzzed_requests_get_documented_answers_and_errors_change_nothing(kind: StoreKind) {
    let s = Setup::with_env(kind, &[("CHIME_PAYLOAD_LIMIT", "4KiB")]).await;
    let api = &s.chimed.api;
    let base = api.base().to_string();
    let mut ids = Vec::new();
    for name in ["seed-a", "seed-b"] {
        ids.push(
            api.create_job(valid_job(name)).await["id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    // A zone job with no live zone: its trigger is the documented 503.
    let zone = api
        .create_job(
            json!({"app": "fuzz", "name": "zoned", "schedule": {"cron": "0 0 0 1 1 *"},
                           "target": {"group": "fuzz", "mode": "zone"}}),
        )
        .await;
    ids.push(zone["id"].as_str().unwrap().to_string());
    let run = api.trigger(&ids[0]).await;
    ids.push(run["id"].as_str().unwrap().to_string());

    let seed = seed();
    let cases: usize = std::env::var("CHIME_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(300);
    eprintln!(
        "api fuzz on {kind:?}: seed {seed} (CHIME_FUZZ_SEED={seed} replays it), {cases} cases"
    );
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    );
    let strategy = case(ids.clone());
    // Authenticated as the admin: the fuzz is aimed past the token check.
    let mut auth = reqwest::header::HeaderMap::new();
    auth.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {}", api.token().expect("the harness's token"))
            .parse()
            .unwrap(),
    );
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .default_headers(auth)
        .build()
        .unwrap();
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    let mut previous = String::new();
    for n in 0..cases {
        let case = strategy.new_tree(&mut runner).expect("a case").current();
        let shown = format!(
            "case {n} (seed {seed}): {} {} content-type {:?} if-match {:?} body {:?}",
            case.method,
            case.target.chars().take(300).collect::<String>(),
            case.content_type,
            case.if_match,
            case.body
                .as_ref()
                .map(|b| String::from_utf8_lossy(&b[..b.len().min(300)]).into_owned())
        );
        let named_job = ids
            .iter()
            .find(|id| case.target.starts_with(&format!("/v1/jobs/{id}")))
            .cloned();
        let mutating = case.method != Method::GET;
        let before = if mutating {
            Some(snapshot(&http, &base, named_job.as_deref(), &previous).await)
        } else {
            None
        };

        let mut request = http.request(case.method.clone(), format!("{base}{}", case.target));
        if let Some(content_type) = &case.content_type {
            request = request.header("content-type", content_type.as_str());
        }
        if let Some(tag) = &case.if_match {
            request = request.header("if-match", tag.as_str());
        }
        if let Some(body) = &case.body {
            request = request.body(body.clone());
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) => panic!("no answer (dropped connection?): {error:?}\n{shown}"),
        };
        previous = shown.clone();
        let status = response.status();
        *statuses.entry(status.as_u16()).or_default() += 1;
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let bytes = match response.bytes().await {
            Ok(bytes) => bytes,
            Err(error) => panic!("answer cut short: {error:?}\n{shown}"),
        };
        if status.is_success() || status == StatusCode::NO_CONTENT {
            if content_type.starts_with("application/json") {
                assert!(
                    serde_json::from_slice::<Value>(&bytes).is_ok(),
                    "a success that is not JSON\n{shown}"
                );
            }
            continue;
        }
        let body: Value = serde_json::from_slice(&bytes).unwrap_or_else(|_| {
            panic!(
                "{status}: error body is not JSON: {:?}\n{shown}",
                String::from_utf8_lossy(&bytes)
            )
        });
        assert!(
            content_type.starts_with("application/json"),
            "{status} with content-type {content_type:?}\n{shown}"
        );
        let code = body["error"]["code"].as_str().unwrap_or_default();
        let documented = CODES.iter().find(|(c, _)| *c == code);
        assert_eq!(
            documented.map(|(_, s)| *s),
            Some(status.as_u16()),
            "{status} {body} is not a documented code for its status\n{shown}"
        );
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{body}\n{shown}"
        );
        assert!(
            body["error"]["field"].is_null() || body["error"]["field"].is_string(),
            "{body}\n{shown}"
        );
        assert!(
            body.as_object().is_some_and(|o| o.len() == 1),
            "{body}\n{shown}"
        );
        if let Some(before) = before {
            let after = snapshot(&http, &base, named_job.as_deref(), &shown).await;
            assert_eq!(
                before, after,
                "an error answer changed state\n{status} {body}\n{shown}"
            );
        }
    }
    eprintln!("api fuzz: statuses {statuses:?}");
    assert!(
        statuses.keys().any(|s| (200..300).contains(s)) && statuses.keys().any(|s| *s >= 400),
        "the cases reached both successes and errors: {statuses:?}"
    );
}
