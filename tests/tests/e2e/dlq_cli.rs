//! `chimectl dlq` against a real chimed: a run that fails permanently lands in its group's
//! dead-letter queue, where the CLI lists, peeks at, replays and purges it.

use std::{
    io::Write,
    process::{Output, Stdio},
    time::Duration,
};

use chime_tests::{TestConsumer, api::Api, binaries, wait};
use serde_json::{Value, json};

use crate::support::{Setup, StoreKind};

const DLQ: &str = "chime.group.dlqcli.dlq";

/// Runs chimectl with `args`, feeding `stdin` to it.
async fn chimectl(server: &Api, args: &[&str], stdin: &str) -> Output {
    let server = server.clone();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let stdin = stdin.to_string();
    tokio::task::spawn_blocking(move || {
        let mut child = binaries::chimectl(&server)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run chimectl");
        child
            .stdin
            .take()
            .expect("piped stdin")
            .write_all(stdin.as_bytes())
            .expect("write chimectl's stdin");
        child.wait_with_output().expect("chimectl finishes")
    })
    .await
    .expect("chimectl task")
}

/// Runs chimectl and insists it succeeds; returns its stdout.
async fn ok(server: &Api, args: &[&str]) -> String {
    let output = chimectl(server, args, "").await;
    assert!(
        output.status.success(),
        "chimectl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The depth `chimectl dlq ls --json` reports for the test's queue, if listed.
async fn depth(server: &Api) -> Option<u64> {
    let list: Value = serde_json::from_str(&ok(server, &["--json", "dlq", "ls"]).await)
        .expect("dlq ls --json prints JSON");
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|item| item["queue"] == DLQ)
        .and_then(|item| item["depth"].as_u64())
}

async fn wait_depth(server: &Api, want: u64) {
    wait::until(
        &format!("{DLQ} to hold {want} message(s)"),
        Duration::from_secs(30),
        || async { (depth(server).await == Some(want)).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chimectl_lists_peeks_replays_and_purges_dead_letters() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let server = s.chimed.api.clone();
    let job = s
        .chimed
        .api
        .create_job(json!({
            "app": "e2e", "name": "doomed",
            "schedule": {"every": "1h"},
            "target": {"group": "dlqcli"},
            "payload": {"fail": "permanent"},
            "max_attempts": 1,
        }))
        .await;
    let _consumer = TestConsumer::start(&s.vhost.amqp_url(), "dlqcli", "c1", &[]).await;
    let run = s.chimed.api.trigger(job["id"].as_str().unwrap()).await;
    let run_id = run["id"].as_str().unwrap().to_string();
    s.chimed
        .api
        .wait_run(&run_id, "the run to die", |r| r["state"] == "dead")
        .await;
    // The reconciler publishes the dead letter on its next pass.
    wait_depth(&server, 1).await;

    let listed = ok(&server, &["dlq", "ls"]).await;
    assert!(
        listed.contains("TOP REASONS") && listed.contains(DLQ),
        "{listed}"
    );

    let peeked = ok(&server, &["dlq", "peek", DLQ]).await;
    let line = peeked
        .lines()
        .find(|l| l.contains(&run_id))
        .unwrap_or_else(|| panic!("peek shows run {run_id}: {peeked}"));
    assert!(line.contains("permanent"), "{peeked}");
    let peeked: Value = serde_json::from_str(&ok(&server, &["--json", "dlq", "peek", DLQ]).await)
        .expect("dlq peek --json prints JSON");
    assert_eq!(peeked["items"][0]["run_id"], run_id.as_str());
    assert_eq!(peeked["items"][0]["job"], "e2e/doomed");
    wait_depth(&server, 1).await;

    // Replayed as attempt 2, the task fails permanently again and comes back.
    let replayed = chimectl(&server, &["--json", "dlq", "replay", DLQ], "").await;
    let stderr = String::from_utf8_lossy(&replayed.stderr);
    assert!(replayed.status.success(), "{stderr}");
    assert!(stderr.contains("replayed 1 of at most 1"), "{stderr}");
    let report: Value = serde_json::from_slice(&replayed.stdout).expect("replay --json");
    assert_eq!(report["replayed"], 1, "{report}");
    s.chimed
        .api
        .wait_run(&run_id, "the replayed run to die again", |r| {
            r["state"] == "dead" && r["attempt"] == 2
        })
        .await;
    wait_depth(&server, 1).await;

    let declined = chimectl(&server, &["dlq", "purge", DLQ], "n\n").await;
    assert!(!declined.status.success());
    let stderr = String::from_utf8_lossy(&declined.stderr);
    assert!(
        stderr.contains(&format!("purge 1 message from {DLQ}? [y/N]"))
            && stderr.contains("aborted"),
        "{stderr}"
    );
    assert_eq!(depth(&server).await, Some(1));

    let purged = ok(&server, &["dlq", "purge", DLQ, "--yes"]).await;
    assert!(purged.contains("purged 1 message"), "{purged}");
    assert_eq!(depth(&server).await, Some(0));

    let wrong = chimectl(&server, &["dlq", "peek", "not-a-dlq"], "").await;
    assert_eq!(wrong.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(stderr.contains("dead-letter queue"), "{stderr}");
}
