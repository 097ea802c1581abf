//! Names that fit alone but not together (issue 34): RabbitMQ names are at most 255
//! bytes. The API refuses what would derive a longer one, naming the field, and stores
//! nothing; a job written into the store around the API's checks makes its own runs
//! `dead` with the reason, and the node keeps firing everything else.

use std::time::Duration;

use chime_tests::{TestConsumer, api::metric, wait};
use chrono::Utc;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::Connection;
use uuid::Uuid;

use crate::support::{Setup, StoreKind, every_second};

/// A name of `len` characters, valid alone (at most 128).
fn long(c: char, len: usize) -> String {
    std::iter::repeat_n(c, len).collect()
}

fn assert_field(status: StatusCode, body: &Value, field: &str) {
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "invalid_field", "{body}");
    assert_eq!(body["error"]["field"], field, "{body}");
}

async fn assert_healthy(s: &Setup) {
    let (status, body) = s.chimed.api.call(Method::GET, "/healthz", None).await;
    assert_eq!(status, StatusCode::OK, "chimed is up: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_too_long_together_are_a_400_naming_the_field_and_store_nothing() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let api = &s.chimed.api;
    let keep = api
        .create_job(json!({"name": "keep", "schedule": {"every": "1m"}, "target": {"group": "g"}}))
        .await;
    let (g, z) = (long('g', 128), long('z', 128));

    // The reported requests: a 274-byte zone queue, a 257-byte routing key.
    let zone_job = json!({"app": "shop", "name": "zoned", "schedule": {"every": "1s"},
        "target": {"group": g, "mode": "zone", "zones": ["dc1", z]}});
    let (status, body) = api.call(Method::POST, "/v1/jobs", Some(&zone_job)).await;
    assert_field(status, &body, "target.zones[1]");
    let topic_job = json!({"app": long('a', 128), "name": long('n', 128),
        "schedule": {"every": "1s"}, "target": {"group": "g"}});
    let (status, body) = api.call(Method::POST, "/v1/jobs", Some(&topic_job)).await;
    assert_field(status, &body, "name");
    // A change is held to the same rule.
    let path = format!("/v1/jobs/{}", keep["id"].as_str().unwrap());
    let change = json!({"target": {"group": g, "mode": "zone", "zones": [z]}});
    let (status, body) = api.call(Method::PATCH, &path, Some(&change)).await;
    assert_field(status, &body, "target.zones[0]");
    assert_eq!(api.job(keep["id"].as_str().unwrap()).await, keep);
    // At the limits it is accepted: 237 bytes of group and zone, 254 of app and name.
    let fits = json!({"app": long('a', 128), "name": long('n', 126), "schedule": {"every": "1m"},
        "target": {"group": g, "mode": "zone", "zones": [long('z', 109)]}});
    let fits = api.create_job(fits).await;

    // DLQ endpoints: a queue name over 255 bytes is a JSON 400, not a dropped connection.
    let queue = format!("chime.{}.dlq", long('q', 300));
    for (method, action) in [
        (Method::GET, "messages"),
        (Method::POST, "replay"),
        (Method::POST, "purge"),
    ] {
        let (status, body) = api
            .call(method, &format!("/v1/dlq/{queue}/{action}"), None)
            .await;
        assert_field(status, &body, "queue");
    }

    let (_, list) = api.call(Method::GET, "/v1/jobs", None).await;
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|j| j["name"].as_str())
        .collect();
    assert_eq!(
        names.len(),
        2,
        "only the jobs that fit were stored: {names:?}"
    );
    assert!(names.contains(&"keep") && names.contains(&fits["name"].as_str().unwrap()));
    assert_healthy(&s).await;
}

/// Rewrites a stored job's names with SQL, as a bad migration or a hand edit might.
async fn poison(s: &Setup, kind: StoreKind, job: &str, set: Poison<'_>) {
    let id: Uuid = job.parse().unwrap();
    match kind {
        StoreKind::Sqlite => {
            let mut conn = sqlx::SqliteConnection::connect(s.db.url()).await.unwrap();
            match set {
                Poison::Zone { group, zone } => sqlx::query(
                    "UPDATE jobs SET settings = json_set(settings, '$.target.group', ?1,
                         '$.target.zones', json_array(?2)) WHERE id = ?3",
                )
                .bind(group)
                .bind(zone)
                .bind(id.to_string()),
                Poison::Names { app, name } => {
                    sqlx::query("UPDATE jobs SET app = ?1, name = ?2 WHERE id = ?3")
                        .bind(app)
                        .bind(name)
                        .bind(id.to_string())
                }
            }
            .execute(&mut conn)
            .await
            .expect("poison the job");
        }
        StoreKind::Postgres => {
            let mut conn = sqlx::PgConnection::connect(s.db.url()).await.unwrap();
            match set {
                Poison::Zone { group, zone } => sqlx::query(
                    "UPDATE jobs SET settings = jsonb_set(jsonb_set(settings, '{target,group}',
                         to_jsonb($1::text)), '{target,zones}', jsonb_build_array($2::text))
                     WHERE id = $3",
                )
                .bind(group)
                .bind(zone)
                .bind(id),
                Poison::Names { app, name } => {
                    sqlx::query("UPDATE jobs SET app = $1, name = $2 WHERE id = $3")
                        .bind(app)
                        .bind(name)
                        .bind(id)
                }
            }
            .execute(&mut conn)
            .await
            .expect("poison the job");
        }
    }
}

enum Poison<'a> {
    Zone { group: &'a str, zone: &'a str },
    Names { app: &'a str, name: &'a str },
}

/// A poisoned zone job's runs end `dead` with the reason; a job whose observer-copy key
/// is too long still runs (without its copy); every other job keeps firing; the node
/// stays up.
async fn poisoned_jobs_never_stop_the_node(kind: StoreKind) {
    let s = Setup::with_env(kind, &[("CHIME_OBSERVER_COPIES", "all")]).await;
    let api = &s.chimed.api;
    let consumer = TestConsumer::start(&s.vhost.amqp_url(), "g", "c1", &[]).await;
    let healthy = api
        .create_job(every_second("healthy", "g", json!({})))
        .await;
    let zoned = api
        .create_job(
            json!({"app": "e2e", "name": "zoned", "schedule": {"every": "1s"},
            "target": {"group": "p", "mode": "zone", "zones": ["dc1"]}}),
        )
        .await;
    let copied = api.create_job(every_second("copied", "g", json!({}))).await;
    let (g, z) = (long('g', 128), long('z', 128));
    let (a, n) = (long('a', 128), long('n', 128));
    let poisoned_at = Utc::now();
    poison(
        &s,
        kind,
        zoned["id"].as_str().unwrap(),
        Poison::Zone {
            group: &g,
            zone: &z,
        },
    )
    .await;
    poison(
        &s,
        kind,
        copied["id"].as_str().unwrap(),
        Poison::Names { app: &a, name: &n },
    )
    .await;

    let after = |run: &Value| {
        run["fire_time"]
            .as_str()
            .and_then(|t| t.parse::<chrono::DateTime<Utc>>().ok())
            .is_some_and(|t| t > poisoned_at + chrono::Duration::seconds(1))
    };
    let dead = wait::until(
        "a poisoned zone run dead",
        Duration::from_secs(30),
        || async {
            api.runs(zoned["id"].as_str().unwrap())
                .await
                .into_iter()
                .find(|r| after(r) && r["state"] == "dead")
        },
    )
    .await;
    let error = dead["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("274 bytes") && error.contains("255"),
        "the run says why: {dead}"
    );
    // The job whose copy cannot be sent still runs, and the healthy one keeps firing.
    for (what, job) in [("copied", &copied), ("healthy", &healthy)] {
        wait::until(
            &format!("a {what} run succeeding after the poison"),
            Duration::from_secs(30),
            || async {
                api.runs(job["id"].as_str().unwrap())
                    .await
                    .into_iter()
                    .find(|r| after(r) && r["state"] == "succeeded")
            },
        )
        .await;
    }
    assert_healthy(&s).await;
    let metrics = api.metrics().await;
    assert!(
        metric(
            &metrics,
            "chime_runs_unpublishable_total{reason=\"name_too_long\"}"
        ) >= 1.0,
        "counted"
    );
    // The timer may still hold the copied job's earlier names for a fire or two after
    // the SQL rewrite: wait for a fire that uses the poisoned ones.
    wait::until(
        "an observer copy counted as lost",
        Duration::from_secs(30),
        || async {
            (metric(&api.metrics().await, "chime_topic_copies_lost_total") >= 1.0).then_some(())
        },
    )
    .await;
    assert!(
        !s.chimed.log().contains("panicked"),
        "no panic in chimed's log"
    );
    consumer.stop().await;
}

crate::per_store!(poisoned_jobs_never_stop_the_node);
