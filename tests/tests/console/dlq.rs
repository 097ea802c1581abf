//! Dead letters: a run given up lands in its group's DLQ; the DLQ page shows it with its
//! reason, replays it by job from the run's "replay" link (a healed consumer runs it to
//! success), and purges the queue after a confirmation (declining changes nothing).

use serde_json::json;

use crate::runs::held_job;
use crate::support::{Console, GROUP, StoreKind};
use chime_tests::TestConsumer;

const QUEUE: &str = "chime.group.console.dlq";

async fn dead_letter_replay_purge(kind: StoreKind) {
    let mut console = Console::start(kind).await;
    let browser = &console.browser;
    let broken = held_job(&console, "dlq-broken", json!({"fail": "permanent"}), 1).await;
    let other = held_job(&console, "dlq-other", json!({"fail": "permanent"}), 1).await;
    let mut dead = Vec::new();
    for job in [&broken, &other] {
        let run = console.api.trigger(job["id"].as_str().unwrap()).await;
        let run_id = run["id"].as_str().unwrap().to_string();
        console
            .api
            .wait_run(&run_id, "the run given up", |r| r["state"] == "dead")
            .await;
        dead.push(run_id);
    }

    // The list: depth, reasons.
    console.visit("#/dlq", "dlq").await;
    let depth = format!("[data-depth=\"{QUEUE}\"]");
    browser
        .wait_text(&depth, "two dead letters", |t| t == "2")
        .await;
    browser
        .wait_text(".dlq-reasons", "the reason", |t| t.contains("permanent"))
        .await;
    browser.screenshot("dlq-list").await;
    console
        .assert_no_console_errors("loading the DLQ list")
        .await;

    // The queue: each message with its reason, payload and history.
    browser.click(&format!("a[href=\"#/dlq/{QUEUE}\"]")).await;
    let message = format!(".dlq-message[data-run=\"{}\"]", dead[0]);
    browser
        .wait_text(
            &format!("{message} .dlq-reason"),
            "the message's reason",
            |t| t.contains("asked to fail (permanent)"),
        )
        .await;
    browser
        .wait_text(&message, "payload and history", |t| {
            t.contains("fail") && t.contains("console/dlq-broken")
        })
        .await;
    browser.screenshot("dlq-queue").await;
    console.assert_no_console_errors("reading the queue").await;

    // The handler is fixed: a healed consumer replaces the failing one.
    console
        .consumer
        .take()
        .expect("the support consumer")
        .stop()
        .await;
    let healed = TestConsumer::start(
        &console.vhost.amqp_url(),
        GROUP,
        "console-consumer-healed",
        &["--heal"],
    )
    .await;

    // "Replay" on the dead run leads to its job's letters; replay them.
    console
        .visit(&format!("#/runs/{}", dead[0]), "run_detail")
        .await;
    browser
        .wait_text("[data-fact=state]", "dead", |t| t == "dead")
        .await;
    browser.click("a[data-nav=dlq]").await;
    browser
        .wait_text("[data-action=replay-job]", "replay by job", |t| {
            t.contains("console/dlq-broken")
        })
        .await;
    browser.click("[data-action=replay-job]").await;
    browser.click("dialog [data-dialog=confirm]").await;
    browser
        .wait_text(".toast", "the replay's result", |t| {
            t.contains("1 replayed") && t.contains("1 remaining")
        })
        .await;
    let replayed = console
        .api
        .wait_run(&dead[0], "the replayed run succeeding", |r| {
            r["state"] == "succeeded"
        })
        .await;
    assert_eq!(replayed["consumer"], healed.instance.as_str());
    assert_eq!(
        console.api.run(&dead[1]).await["state"],
        "dead",
        "only the job's letters replay"
    );
    browser
        .wait_text(&depth, "one letter left", |t| t == "1")
        .await;
    console
        .visit(&format!("#/runs/{}", dead[0]), "run_detail")
        .await;
    browser
        .wait_text("[data-fact=state]", "succeeded", |t| t == "succeeded")
        .await;
    console.assert_no_console_errors("replaying").await;

    // Purge: declining keeps the letter, confirming empties the queue.
    console.visit(&format!("#/dlq/{QUEUE}"), "dlq").await;
    browser.wait_text(&depth, "one letter", |t| t == "1").await;
    browser.click("[data-action=purge]").await;
    browser.click("dialog [data-dialog=cancel]").await;
    let (_, queues) = console
        .api
        .call(reqwest::Method::GET, "/v1/dlq", None)
        .await;
    let ours = |body: &serde_json::Value| {
        body["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["queue"] == QUEUE)
            .cloned()
            .unwrap()
    };
    assert_eq!(
        ours(&queues)["depth"],
        1,
        "declining the purge changed nothing"
    );
    browser.click("[data-action=purge]").await;
    browser.click("dialog [data-dialog=confirm]").await;
    browser
        .wait_text(".toast", "the purge's result", |t| t.contains("1 purged"))
        .await;
    browser
        .wait_text(&depth, "an empty queue", |t| t == "0")
        .await;
    browser
        .wait_text(".dlq-messages", "no message", |t| t.contains("empty"))
        .await;
    let (_, queues) = console
        .api
        .call(reqwest::Method::GET, "/v1/dlq", None)
        .await;
    assert_eq!(ours(&queues)["depth"], 0);
    console.assert_no_console_errors("purging").await;
}

crate::per_store!(dead_letter_replay_purge);
