//! The job pages: the list's filters live in the link; a job is created through the form
//! (a bad cron refused at its field first), its triggered run goes from unfinished to
//! `succeeded` on the detail page without a reload, it is paused, resumed and edited, an
//! edit racing another tab's is refused as a version conflict, and it is deleted after a
//! confirmation.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::support::{Console, GROUP, StoreKind};

/// Every console error is an expected failed request: answered `status`, to `path`.
fn only_failed_requests(errors: &[String], status: &str, path: &str) {
    assert!(
        errors
            .iter()
            .all(|e| e.contains(status) && e.contains(path)),
        "unexpected console errors: {errors:#?}"
    );
}

/// The current value of the `css` input (a property: the attribute is not set).
async fn value(browser: &chime_tests::browser::Browser, css: &str) -> String {
    browser.find(css).await;
    browser
        .eval(
            "return document.querySelector(arguments[0]).value;",
            vec![json!(css)],
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_string()
}

async fn job_pages(kind: StoreKind) {
    let console = Console::start(kind).await;
    let browser = &console.browser;

    // The list: filters are in the hash's query, so a filtered list is a link.
    console
        .api
        .create_job(json!({"app": "other", "name": "elsewhere",
            "schedule": {"every": "1h"}, "target": {"group": GROUP}}))
        .await;
    console.visit("#/jobs?app=other", "jobs").await;
    console
        .assert_no_console_errors("the filtered job list")
        .await;
    let rows = browser.all(".jobs-list tbody tr").await;
    assert_eq!(rows.len(), 1, "one job of app other");
    browser
        .wait_text(".jobs-list tbody tr", "the job", |t| {
            t.contains("other/elsewhere") && t.contains("every 1h")
        })
        .await;
    assert_eq!(value(browser, "input[name=app]").await, "other");
    browser.screenshot("jobs-list").await;
    // Sorting is the API's, kept in the link with the filters.
    browser.click("th button.sort").await;
    browser
        .wait_text("th[aria-sort=ascending]", "sorted by name", |t| {
            t.contains("Job")
        })
        .await;
    let url = browser.url().await;
    assert!(
        url.contains("sort=name") && url.contains("app=other"),
        "{url}"
    );
    console
        .assert_no_console_errors("sorting the job list")
        .await;
    console.visit("#/jobs?app=shop", "jobs").await;
    browser
        .wait_text(".jobs-list", "no job of app shop yet", |t| {
            t.contains("No job matches")
        })
        .await;

    // The form: a bad cron is refused at the cron field, by the preview and by the save.
    browser.click("[data-action=create]").await;
    browser.wait_page("job_form").await;
    console.assert_no_console_errors("the new-job form").await;
    browser.fill("input[name=app]", "shop").await;
    browser.fill("input[name=name]", "nightly").await;
    browser.select("select[name='schedule.kind']", "cron").await;
    browser
        .fill("input[name='schedule.cron']", "0 61 * * * *")
        .await;
    browser
        .fill("input[name='schedule.timezone']", "Asia/Shanghai")
        .await;
    browser.fill("input[name='target.group']", GROUP).await;
    browser
        .fill("textarea[name=payload]", r#"{"sleep_ms": 2500}"#)
        .await;
    browser.click("[data-action=save]").await;
    let error = browser
        .wait_text(
            ".field-error[data-field='schedule.cron']",
            "the cron refused at its field",
            |t| t.contains("61") || t.contains("cron"),
        )
        .await;
    assert!(!error.is_empty());
    let cron = browser.find("input[name='schedule.cron']").await;
    assert_eq!(
        browser.attribute(&cron, "aria-invalid").await.as_deref(),
        Some("true")
    );
    assert!(browser.url().await.ends_with("#/jobs/new"), "not saved");
    only_failed_requests(&browser.console_errors().await, "400", "/v1/");

    // A good cron: its fires are previewed in words in its zone, then it saves.
    browser
        .fill("input[name='schedule.cron']", "0 30 9 * * *")
        .await;
    browser
        .wait_text(
            "[data-preview] [data-description]",
            "the schedule in words",
            |t| t == "every day at 09:30:00, Asia/Shanghai",
        )
        .await;
    browser
        .wait_gone(".field-error[data-field='schedule.cron']")
        .await;
    browser.screenshot("job-form").await;
    only_failed_requests(&browser.console_errors().await, "400", "/v1/");
    browser.click("[data-action=save]").await;
    browser.wait_page("job_detail").await;
    console.assert_no_console_errors("creating the job").await;
    let url = browser.url().await;
    let id = url.rsplit("#/jobs/").next().unwrap().to_string();
    let (status, job) = console
        .api
        .call(Method::GET, &format!("/v1/jobs/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["name"], "nightly");
    assert_eq!(job["schedule"]["timezone"], "Asia/Shanghai");
    assert_eq!(job["payload"], json!({"sleep_ms": 2500}));
    browser
        .wait_text("[data-description]", "the schedule in words", |t| {
            t == "every day at 09:30:00, Asia/Shanghai"
        })
        .await;

    // Trigger: the run shows unfinished, then succeeded, on the same page (no reload).
    browser
        .eval("window.__sameDocument = true; return true;", vec![])
        .await;
    browser.click("[data-action=trigger]").await;
    browser
        .wait_text(
            ".job-runs tbody td[data-label=State]",
            "the run unfinished",
            |t| ["scheduled", "dispatched", "acked"].contains(&t),
        )
        .await;
    browser
        .wait_text(
            ".job-runs tbody td[data-label=State]",
            "the run succeeded",
            |t| t == "succeeded",
        )
        .await;
    assert_eq!(
        browser
            .eval("return window.__sameDocument === true;", vec![])
            .await,
        json!(true),
        "the page was not reloaded"
    );
    let bar = browser.find(".timeline a[data-state=succeeded]").await;
    assert!(
        browser
            .attribute(&bar, "href")
            .await
            .unwrap_or_default()
            .starts_with("#/runs/")
    );
    browser
        .wait_text(
            ".job-runs tbody td[data-label=Consumer]",
            "the consumer",
            |t| t == "console-consumer-1",
        )
        .await;
    browser.screenshot("job-detail").await;
    console.assert_no_console_errors("the run's life").await;

    // Pause and resume.
    browser.click("[data-action=pause]").await;
    browser
        .wait_text("h1", "paused", |t| t.contains("paused"))
        .await;
    browser.find("[data-action=resume]").await;
    browser.click("[data-action=resume]").await;
    browser
        .wait_text("h1", "running", |t| t.contains("running"))
        .await;
    let (_, job) = console
        .api
        .call(Method::GET, &format!("/v1/jobs/{id}"), None)
        .await;
    assert_eq!(job["paused"], false);
    console
        .assert_no_console_errors("pausing and resuming")
        .await;

    // Edit.
    browser.click("[data-action=edit]").await;
    browser.wait_page("job_form").await;
    browser.fill("input[name=max_attempts]", "3").await;
    browser.click("[data-action=save]").await;
    browser.wait_page("job_detail").await;
    browser
        .wait_text("dl.facts", "the edit", |t| t.contains("3 attempts"))
        .await;
    console.assert_no_console_errors("editing").await;

    // A version conflict: this tab opens the form, another tab saves first.
    browser.click("[data-action=edit]").await;
    browser.wait_page("job_form").await;
    browser.fill("input[name=max_attempts]", "7").await;
    let (first, _second) = browser.new_tab().await;
    browser.open(&console.url("")).await;
    browser.wait_page("signin").await;
    console.sign_in(console.chimed.token()).await;
    console
        .visit(&format!("#/jobs/{id}/edit"), "job_form")
        .await;
    browser.fill("input[name=max_attempts]", "9").await;
    browser.click("[data-action=save]").await;
    browser.wait_page("job_detail").await;
    // Leave the polling detail page, so the deletion below shows no 404 in this tab.
    console.visit("#/jobs", "jobs").await;
    browser.switch_to(&first).await;
    browser.click("[data-action=save]").await;
    browser
        .wait_text("[data-conflict]", "the conflict", |t| {
            t.contains("changed by someone else since you opened it")
        })
        .await;
    only_failed_requests(&browser.console_errors().await, "409", &id);
    let (_, job) = console
        .api
        .call(Method::GET, &format!("/v1/jobs/{id}"), None)
        .await;
    assert_eq!(job["max_attempts"], 9, "the other tab's change stands");
    browser.click("[data-nav=reload]").await;
    browser.wait_page("job_form").await;
    assert_eq!(value(browser, "input[name=max_attempts]").await, "9");

    // Delete, after a confirmation (cancelled once).
    console.visit(&format!("#/jobs/{id}"), "job_detail").await;
    browser.click("[data-action=delete]").await;
    browser.click("dialog [data-dialog=cancel]").await;
    browser.wait_gone("dialog").await;
    let (status, _) = console
        .api
        .call(Method::GET, &format!("/v1/jobs/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "cancelled: still there");
    browser.click("[data-action=delete]").await;
    browser.click("dialog [data-dialog=confirm]").await;
    browser.wait_page("jobs").await;
    let (status, _) = console
        .api
        .call(Method::GET, &format!("/v1/jobs/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "deleted");
    console.assert_no_console_errors("deleting").await;
}

crate::per_store!(job_pages);
