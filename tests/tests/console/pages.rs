//! Every page of the console loads with no console error and no failed request, and is
//! photographed (`page-<name>`; the overview also at phone width and in the dark theme).
//! The overview shows a trigger's fire without a reload, and the tokens page creates a
//! token (its secret shown once) and revokes it.

use std::time::Duration;

use chime_tests::wait;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Console, GROUP, StoreKind};

/// The overview's "Fired" card as a number.
async fn fired(console: &Console) -> u64 {
    let text = console
        .browser
        .wait_text("[data-card=fired] .value", "the fired count", |t| {
            !t.is_empty()
        })
        .await;
    text.replace([',', '.', ' ', '\u{a0}'], "")
        .parse()
        .unwrap_or_else(|_| panic!("a count: {text:?}"))
}

async fn every_page_loads(kind: StoreKind) {
    let console = Console::start(kind).await;
    let browser = &console.browser;
    console.visit("#/", "overview").await;
    assert_eq!(fired(&console).await, 0, "nothing fired yet");
    for section in ["stats", "cluster", "consumers", "dlq"] {
        browser.find(&format!("[data-section={section}]")).await;
    }

    // A trigger shows on the overview by itself (its refresh, no reload).
    let job = console
        .api
        .create_job(json!({
            "app": "pages", "name": "tick",
            "schedule": {"every": "1h"},
            "target": {"group": GROUP},
            "payload": {},
        }))
        .await;
    let job_id = job["id"].as_str().expect("job id").to_string();
    let run = console.api.trigger(&job_id).await;
    let run_id = run["id"].as_str().expect("run id").to_string();
    console
        .api
        .wait_run(&run_id, "the run to succeed", |r| r["state"] == "succeeded")
        .await;
    let shown = wait::until(
        "the overview to count the fire",
        Duration::from_secs(30),
        || async {
            let n = fired(&console).await;
            (n >= 1).then_some(n)
        },
    )
    .await;
    assert!(shown >= 1);
    browser
        .wait_text("[data-state-count=succeeded]", "one success", |t| t == "1")
        .await;
    assert!(
        !browser.all(".bars[data-bars=fired] .bar").await.is_empty(),
        "per-minute bars"
    );
    console.assert_no_console_errors("the overview").await;
    let shot = browser.screenshot("page-overview").await;
    let docs =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/console-overview.png");
    std::fs::copy(&shot, docs).expect("overview screenshot copied to docs/");

    let pages = [
        ("#/jobs".to_string(), "jobs"),
        (format!("#/jobs/{job_id}"), "job_detail"),
        ("#/runs".to_string(), "runs"),
        (format!("#/runs/{run_id}"), "run_detail"),
        ("#/dlq".to_string(), "dlq"),
        ("#/cluster".to_string(), "cluster"),
        ("#/consumers".to_string(), "consumers"),
        ("#/audit".to_string(), "audit"),
        ("#/tokens".to_string(), "tokens"),
    ];
    for (hash, name) in &pages {
        console.visit(hash, name).await;
        console.assert_no_console_errors(hash).await;
        browser.screenshot(&format!("page-{name}")).await;
    }

    // What the operations pages show, from the API's answers.
    console.visit("#/cluster", "cluster").await;
    browser
        .wait_text("[data-card=nodes] .value", "one live node", |t| {
            t == "1 / 1"
        })
        .await;
    console.visit("#/consumers", "consumers").await;
    browser
        .wait_text(
            "tr[data-key=\"console/console-consumer-1\"]",
            "the consumer",
            |t| t.contains("console-consumer-1") && t.contains("live"),
        )
        .await;
    console.visit("#/audit?action=job.trigger", "audit").await;
    browser
        .wait_text("[data-section=audit] tbody", "the trigger's entry", |t| {
            t.contains("job.trigger") && t.contains(&job_id)
        })
        .await;
    assert!(
        !browser
            .text(&browser.find("[data-section=audit] tbody").await)
            .await
            .contains("job.create"),
        "the action filter applies"
    );

    // The overview on a phone and in the dark theme.
    console.visit("#/", "overview").await;
    browser.resize(390, 844).await;
    browser.find("[data-card=fired]").await;
    browser.screenshot("overview-phone").await;
    browser.resize(1280, 900).await;
    let theme = browser
        .eval("return document.documentElement.dataset.theme;", vec![])
        .await;
    if theme != "dark" {
        browser.click("#theme").await;
    }
    let theme = browser
        .eval("return document.documentElement.dataset.theme;", vec![])
        .await;
    assert_eq!(theme, "dark");
    browser.screenshot("overview-dark").await;
    browser.click("#theme").await;
    console
        .assert_no_console_errors("the phone and dark overview")
        .await;
}

async fn tokens_create_and_revoke(kind: StoreKind) {
    let console = Console::start(kind).await;
    let browser = &console.browser;
    console.visit("#/tokens", "tokens").await;
    browser.fill("input[name=name]", "pages-ci").await;
    browser.select("select[name=role]", "operator").await;
    browser.fill("input[name=apps]", "shop").await;
    browser.click("button[data-action=create]").await;
    browser
        .wait_text(".token-secret .warning", "the show-once warning", |t| {
            t.contains("shown once")
        })
        .await;
    let secret = browser
        .eval(
            "return document.getElementById('token-secret').value;",
            vec![],
        )
        .await;
    let secret = secret.as_str().expect("the secret").to_string();
    assert!(secret.starts_with("chime_"), "{secret}");
    let listed = browser
        .wait_text("tr[data-key=pages-ci]", "the new token", |t| {
            t.contains("operator") && t.contains("shop")
        })
        .await;
    assert!(!listed.contains(&secret), "the list never shows a secret");
    // The secret works, for its role.
    let (status, me) = chime_tests::api::Api::new(console.api.base())
        .with_token(Some(&secret))
        .call(Method::GET, "/v1/me", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{me}");
    assert_eq!(me["role"], "operator");
    // Shown once: coming back to the page shows no secret.
    console.visit("#/", "overview").await;
    console.visit("#/tokens", "tokens").await;
    assert!(
        browser.all("#token-secret").await.is_empty(),
        "secret shown again"
    );

    // A bad name is refused at its field.
    browser.fill("input[name=name]", "no spaces allowed").await;
    browser.click("button[data-action=create]").await;
    browser
        .wait_text(".field-error[data-field=name]", "the refusal", |t| {
            !t.is_empty()
        })
        .await;

    browser
        .click("button[data-action=revoke][data-token=pages-ci]")
        .await;
    browser.click("dialog [data-dialog=confirm]").await;
    browser
        .wait_text("tr[data-key=pages-ci]", "the revocation", |t| {
            t.contains("revoked")
        })
        .await;
    assert!(
        browser
            .all("button[data-action=revoke][data-token=pages-ci]")
            .await
            .is_empty(),
        "a revoked token offers no revoke"
    );
    let (_, tokens) = console.api.call(Method::GET, "/v1/tokens", None).await;
    let revoked: Vec<&Value> = tokens["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|t| t["name"] == "pages-ci")
        .collect();
    assert!(!revoked[0]["revoked_at"].is_null(), "{tokens}");
    // The refused create was the one failed request.
    let errors = browser.console_errors().await;
    assert!(
        errors
            .iter()
            .all(|e| e.contains("/v1/tokens") && e.contains("400")),
        "{errors:#?}"
    );
    browser.screenshot("page-tokens-revoked").await;
}

crate::per_store!(every_page_loads, tokens_create_and_revoke);
