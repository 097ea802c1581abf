//! A reader token sees the whole console and can change nothing: no page shows a
//! `[data-action]` control (with a job, a run and a dead letter on record), the nav has
//! no Tokens page, and an action forced from the browser with the tab's token is refused
//! by the API (403) and changes nothing.

use std::time::Duration;

use chime_tests::wait;
use reqwest::Method;
use serde_json::json;

use crate::support::{Console, GROUP, StoreKind};

const DLQ: &str = "chime.group.console.dlq";

async fn reader_sees_no_action(kind: StoreKind) {
    let console = Console::start_signed_out(kind).await;
    let browser = &console.browser;
    let api = &console.api;

    let job = api
        .create_job(json!({
            "app": "ro", "name": "fine",
            "schedule": {"every": "1h"},
            "target": {"group": GROUP},
            "payload": {},
        }))
        .await;
    let job_id = job["id"].as_str().expect("job id").to_string();
    let run = api.trigger(&job_id).await;
    let run_id = run["id"].as_str().expect("run id").to_string();
    api.wait_run(&run_id, "the run to succeed", |r| r["state"] == "succeeded")
        .await;
    let doomed = api
        .create_job(json!({
            "app": "ro", "name": "doomed",
            "schedule": {"every": "1h"},
            "target": {"group": GROUP},
            "payload": {"fail": "permanent"},
            "max_attempts": 1,
        }))
        .await;
    let dead = api.trigger(doomed["id"].as_str().expect("job id")).await;
    api.wait_run(
        dead["id"].as_str().expect("run id"),
        "the run to die",
        |r| r["state"] == "dead",
    )
    .await;
    wait::until("the dead letter", Duration::from_secs(30), || async {
        let (_, dlq) = api.call(Method::GET, "/v1/dlq", None).await;
        dlq["items"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|q| q["queue"] == DLQ && q["depth"].as_u64().unwrap_or(0) >= 1)
            .then_some(())
    })
    .await;

    let reader = console.token("ro", "reader", &["*"]).await;
    console.sign_in(&reader).await;
    browser
        .wait_text("#whoami", "the reader", |t| t.contains("reader"))
        .await;
    let nav = browser.text(&browser.find("#nav").await).await;
    assert!(nav.contains("Overview") && !nav.contains("Tokens"), "{nav}");

    let pages = [
        ("#/".to_string(), "overview"),
        ("#/jobs".to_string(), "jobs"),
        (format!("#/jobs/{job_id}"), "job_detail"),
        ("#/runs".to_string(), "runs"),
        (format!("#/runs/{run_id}"), "run_detail"),
        ("#/dlq".to_string(), "dlq"),
        (format!("#/dlq/{DLQ}"), "dlq"),
        ("#/cluster".to_string(), "cluster"),
        ("#/consumers".to_string(), "consumers"),
        ("#/audit".to_string(), "audit"),
    ];
    for (hash, name) in &pages {
        console.visit(hash, name).await;
        let actions = browser.all("[data-action]").await;
        assert!(
            actions.is_empty(),
            "{hash} shows {} action(s) to a reader",
            actions.len()
        );
        console.assert_no_console_errors(hash).await;
    }
    // The overview's sections are all readable by a reader, and shown.
    console.visit("#/", "overview").await;
    for section in ["stats", "cluster", "consumers", "dlq"] {
        browser.find(&format!("[data-section={section}]")).await;
    }
    browser
        .wait_text("[data-card=dlq-total] .value", "the dead letter", |t| {
            t == "1"
        })
        .await;
    // Tokens is refused by the shell itself.
    browser.open(&console.url("#/tokens")).await;
    browser
        .wait_text("[data-page=tokens] h1", "the refusal", |t| {
            t.contains("Not allowed")
        })
        .await;
    assert!(browser.all("[data-action]").await.is_empty());

    // Forcing an action with the tab's own token: the API refuses it.
    let status = browser
        .eval(
            "return fetch(`/v1/jobs/${arguments[0]}/pause`, {method: 'POST', \
             headers: {Authorization: `Bearer ${sessionStorage.getItem('chime.token')}`}}) \
             .then((r) => r.status);",
            vec![json!(job_id)],
        )
        .await;
    assert_eq!(status, json!(403));
    assert_eq!(
        api.job(&job_id).await["paused"],
        false,
        "the job is not paused"
    );
}

crate::per_store!(reader_sees_no_action);
