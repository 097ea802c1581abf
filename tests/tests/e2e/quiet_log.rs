//! A normal day in chimed's log: on a fresh vhost, start, a fire, a dead-letter replay, a
//! dead-letter queue that does not exist, and SIGTERM log no ERROR and no WARN line
//! beyond the one the scenario asks for, carry no terminal colour codes in a file, and
//! name the version and commit at start.

use std::time::Duration;

use chime_tests::{Chimed, TestConsumer, TestDatabase, TestVhost, chimed::ChimedConfig, wait};
use reqwest::{Method, StatusCode};
use serde_json::json;

const GROUP: &str = "quiet";
const DLQ: &str = "chime.group.quiet.dlq";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_normal_day_logs_no_error_and_no_unexplained_warning() {
    let vhost = TestVhost::new();
    let db = TestDatabase::sqlite();
    let config = ChimedConfig::new(db.url(), &vhost.amqp_url())
        .env("CHIME_LOG", "info")
        .log_to_file();
    let chimed = Chimed::start(config).await;
    let api = chimed.api.clone();
    let _consumer = TestConsumer::start(&vhost.amqp_url(), GROUP, "c1", &[]).await;

    // A fire that succeeds.
    let fine = api
        .create_job(json!({
            "app": "e2e", "name": "fine", "schedule": {"every": "1h"},
            "target": {"group": GROUP},
        }))
        .await;
    let run = api.trigger(fine["id"].as_str().unwrap()).await;
    api.wait_run(run["id"].as_str().unwrap(), "the fire to succeed", |r| {
        r["state"] == "succeeded"
    })
    .await;

    // A run given up after its only attempt (the one WARN line this scenario expects),
    // replayed from the dead-letter queue as attempt 2, which succeeds.
    let flaky = api
        .create_job(json!({
            "app": "e2e", "name": "flaky", "schedule": {"every": "1h"},
            "target": {"group": GROUP}, "max_attempts": 1,
            "payload": {"fail_until_attempt": 2},
        }))
        .await;
    let run = api.trigger(flaky["id"].as_str().unwrap()).await;
    let given_up = run["id"].as_str().unwrap().to_string();
    api.wait_run(&given_up, "the run to be given up", |r| {
        r["state"] == "dead"
    })
    .await;
    wait::until(
        "the dead letter to reach its queue",
        Duration::from_secs(30),
        || async {
            let (_, list) = api.call(Method::GET, "/v1/dlq", None).await;
            list["items"]
                .as_array()?
                .iter()
                .any(|q| q["queue"] == DLQ && q["depth"] == 1)
                .then_some(())
        },
    )
    .await;
    let (status, report) = api
        .call(
            Method::POST,
            &format!("/v1/dlq/{DLQ}/replay"),
            Some(&json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["replayed"], 1, "{report}");
    api.wait_run(&given_up, "the replayed run to succeed", |r| {
        r["state"] == "succeeded" && r["attempt"] == 2
    })
    .await;

    // A group some job targets whose dead-letter queue is gone (deleted by an operator):
    // 404, and nothing in the log about it.
    api.create_job(json!({
        "app": "e2e", "name": "unfired", "schedule": {"every": "1h"},
        "target": {"group": "nobody"}, "paused": true,
    }))
    .await;
    let (_connection, channel) = vhost.channel().await;
    channel
        .queue_delete(
            "chime.group.nobody.dlq".into(),
            lapin::options::QueueDeleteOptions::default(),
        )
        .await
        .expect("delete the dead-letter queue");
    let (status, body) = api
        .call(Method::GET, "/v1/dlq/chime.group.nobody.dlq/messages", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    let log_path = chimed.log_path().clone();
    let exit = chimed.stop().await;
    assert!(exit.success(), "chimed exits cleanly on SIGTERM: {exit:?}");
    let log = std::fs::read_to_string(&log_path).expect("chimed's log");

    assert!(
        !log.contains('\u{1b}'),
        "a log written to a file has no terminal colour codes:\n{log}"
    );
    let started = log
        .lines()
        .find(|l| l.contains("chimed starting"))
        .unwrap_or_else(|| panic!("chimed logs its start:\n{log}"));
    assert!(
        started.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION")))
            && started.contains(&format!("commit=\"{}\"", chime_scheduler::GIT_COMMIT)),
        "{started}"
    );
    assert!(log.contains("chimed stopped"), "{log}");
    let level = |line: &str| {
        line.split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string()
    };
    let loud: Vec<&str> = log
        .lines()
        .filter(|l| matches!(level(l).as_str(), "ERROR" | "WARN"))
        .collect();
    let expected =
        |l: &str| l.contains("WARN") && l.contains("run given up") && l.contains(&given_up);
    assert_eq!(
        loud.iter().filter(|l| expected(l)).count(),
        1,
        "the given-up run is warned about once:\n{log}"
    );
    let unexpected: Vec<&&str> = loud.iter().filter(|l| !expected(l)).collect();
    assert!(
        unexpected.is_empty(),
        "no other ERROR or WARN line in normal operation: {unexpected:#?}\nwhole log:\n{log}"
    );
}
