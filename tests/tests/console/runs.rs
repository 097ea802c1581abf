//! Runs and run detail: a triggered run is found by the runs page's job and state
//! filters and turns `succeeded` there without a reload; its detail shows the output; an
//! unfinished run is cancelled from its detail page after a confirmation.

use serde_json::{Value, json};

use crate::support::{Console, GROUP, StoreKind};

/// A paused job of group `console` (fired only by triggers) with `payload`.
pub async fn held_job(console: &Console, name: &str, payload: Value, max_attempts: u32) -> Value {
    console
        .api
        .create_job(json!({
            "app": "console", "name": name,
            "schedule": {"cron": "0 0 0 1 1 *", "timezone": "UTC"},
            "target": {"group": GROUP}, "payload": payload,
            "max_attempts": max_attempts, "paused": true,
        }))
        .await
}

fn id(value: &Value) -> String {
    value["id"].as_str().expect("an id").to_string()
}

async fn search_watch_and_cancel(kind: StoreKind) {
    let console = Console::start(kind).await;
    let browser = &console.browser;
    let job = held_job(&console, "runs-sleepy", json!({"sleep_ms": 4000}), 3).await;
    let job_id = id(&job);
    let run_id = id(&console.api.trigger(&job_id).await);

    // Search by job through the form: the filter lands in the hash (a link).
    console.visit("#/runs", "runs").await;
    console
        .assert_no_console_errors("loading the runs page")
        .await;
    browser.fill("input[name=job]", &job_id).await;
    browser.click("form[role=search] button[type=submit]").await;
    let row_state = format!("tr[data-key=\"{run_id}\"] .state");
    let first = browser
        .wait_text(&row_state, "the triggered run", |t| !t.is_empty())
        .await;
    assert!(browser.url().await.contains(&format!("job={job_id}")));
    assert_ne!(
        first, "succeeded",
        "the run sleeps 4 s; it cannot have finished yet"
    );
    // No reload: a marker set on this document survives until the state changes.
    browser
        .eval("window.chimeMarker = 42; return null;", vec![])
        .await;
    browser
        .wait_text(&row_state, "the run succeeding", |t| t == "succeeded")
        .await;
    assert_eq!(
        browser
            .eval("return window.chimeMarker ?? null;", vec![])
            .await,
        json!(42),
        "the page was reloaded"
    );
    console.assert_no_console_errors("watching the run").await;

    // The state filter finds it too; another state does not.
    console
        .visit(&format!("#/runs?state=succeeded&job={job_id}"), "runs")
        .await;
    browser
        .wait_text(&row_state, "the run among succeeded runs", |t| {
            t == "succeeded"
        })
        .await;
    browser.screenshot("runs-list").await;
    console
        .visit(&format!("#/runs?state=dead&job={job_id}"), "runs")
        .await;
    browser
        .wait_text(".run-results .empty", "no dead run", |t| {
            t.contains("No run")
        })
        .await;
    console.assert_no_console_errors("filtering by state").await;

    // Detail: the output the consumer answered.
    console
        .visit(&format!("#/runs/{run_id}"), "run_detail")
        .await;
    browser
        .wait_text("[data-fact=state]", "the state", |t| t == "succeeded")
        .await;
    browser
        .wait_text(".run-output", "the output", |t| {
            t.contains("console-consumer-1") && t.contains("sleep_ms")
        })
        .await;
    assert!(
        browser.all("[data-action=cancel-run]").await.is_empty(),
        "a finished run offers no cancel"
    );
    browser.screenshot("run-detail").await;
    console
        .assert_no_console_errors("loading the run detail")
        .await;

    // Cancel a run the consumer holds.
    let holder = held_job(
        &console,
        "runs-holder",
        json!({"wait_for_cancel_ms": 30000}),
        1,
    )
    .await;
    let held = id(&console.api.trigger(&id(&holder)).await);
    console
        .api
        .wait_run(&held, "the consumer holding the run", |r| {
            r["state"] == "acked"
        })
        .await;
    console.visit(&format!("#/runs/{held}"), "run_detail").await;
    browser
        .wait_text("[data-fact=state]", "acked", |t| t == "acked")
        .await;
    // Declining the dialog changes nothing.
    browser.click("[data-action=cancel-run]").await;
    browser.click("dialog [data-dialog=cancel]").await;
    assert_eq!(console.api.run(&held).await["state"], "acked");
    browser.click("[data-action=cancel-run]").await;
    browser.click("dialog [data-dialog=confirm]").await;
    browser
        .wait_text("[data-fact=state]", "the run cancelled", |t| {
            t == "cancelled"
        })
        .await;
    let cancelled = console.api.run(&held).await;
    let by = cancelled["cancelled_by"]
        .as_str()
        .expect("the canceller")
        .to_string();
    browser
        .wait_text("[data-fact=cancelled_by]", "who cancelled", |t| t == by)
        .await;
    browser
        .wait_text(".toast", "the result", |t| t.contains("cancelled"))
        .await;
    assert!(browser.all("[data-action=cancel-run]").await.is_empty());
    assert_eq!(cancelled["state"], "cancelled");
    console.assert_no_console_errors("cancelling a run").await;
}

crate::per_store!(search_watch_and_cancel);
