//! chimed restarted while jobs are due (after a SIGKILL, or a clean stop): missed fires
//! follow each job's misfire policy — fires recorded ahead of their time before the
//! stop included (issue 34 §2), judged by when each run was published — and no fire is
//! recorded twice.

use std::{collections::HashSet, time::Duration};

use chime_tests::{Chimed, TestConsumer, wait};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::{
    per_store,
    support::{Setup, StoreKind},
};

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str().expect("a timestamp").parse().expect("RFC 3339")
}

async fn missed_fires_follow_the_misfire_policy(kind: StoreKind) {
    missed_fires_after(kind, true).await;
}

async fn missed_fires_follow_the_misfire_policy_after_a_clean_stop(kind: StoreKind) {
    missed_fires_after(kind, false).await;
}

/// `dispatched_at` (the confirm, or the ack that came first) less `fire_time`.
fn publish_delay(run: &Value) -> chrono::Duration {
    time(&run["dispatched_at"]) - time(&run["fire_time"])
}

async fn missed_fires_after(kind: StoreKind, sigkill: bool) {
    let s = Setup::with_env(kind, &[("CHIME_MISFIRE_GRACE", "1s")]).await;
    let _consumer = TestConsumer::start(&s.vhost.amqp_url(), "workers", "w1", &[]).await;
    let api = s.chimed.api.clone();
    let mut ids = Vec::new();
    for (name, policy) in [
        ("once", "fire_once"),
        ("skip", "skip"),
        ("catch", "catch_up"),
    ] {
        let job = api
            .create_job(json!({
                "name": name, "schedule": {"every": "1s"}, "target": {"group": "workers"},
                "misfire": policy, "catch_up_limit": 3,
            }))
            .await;
        ids.push((policy, job["id"].as_str().unwrap().to_string()));
    }
    for (_, id) in &ids {
        wait::until(
            "two fires before the crash",
            Duration::from_secs(15),
            || async { (api.runs(id).await.len() >= 2).then_some(()) },
        )
        .await;
    }

    let (config, port) = (s.chimed.config().clone(), s.chimed.port());
    let Setup { chimed, db, vhost } = s;
    let stopped_at = Utc::now();
    if sigkill {
        chimed.kill().await;
    } else {
        chimed.stop().await;
    }
    // The outage itself: fires come due while no scheduler runs.
    tokio::time::sleep(Duration::from_millis(6_000)).await;
    let restarted_at = Utc::now();
    let chimed = Chimed::restart_from(config, port).await;
    let api = chimed.api.clone();

    for (policy, id) in &ids {
        let runs = wait::until(
            "two regular fires after the restart",
            Duration::from_secs(20),
            || async {
                let runs = api.runs(id).await;
                let after = runs
                    .iter()
                    .filter(|r| time(&r["created_at"]) >= restarted_at)
                    .count();
                (after >= 2 + if *policy == "catch_up" { 3 } else { 1 }).then_some(runs)
            },
        )
        .await;
        let fire_times: Vec<_> = runs.iter().map(|r| time(&r["fire_time"])).collect();
        assert_eq!(
            fire_times.iter().collect::<HashSet<_>>().len(),
            fire_times.len(),
            "{policy}: no fire recorded twice"
        );
        let last_before = runs
            .iter()
            .filter(|r| time(&r["created_at"]) < restarted_at)
            .map(|r| time(&r["fire_time"]))
            .max()
            .unwrap();
        let start_batch_at = runs
            .iter()
            .map(|r| time(&r["created_at"]))
            .filter(|t| *t >= restarted_at)
            .min()
            .unwrap();
        let mut batch: Vec<_> = runs
            .iter()
            .filter(|r| time(&r["created_at"]) == start_batch_at)
            .map(|r| time(&r["fire_time"]))
            .collect();
        batch.sort();
        assert!(
            start_batch_at - last_before > chrono::Duration::seconds(4),
            "{policy}: the outage missed fires"
        );
        let latest_due = *batch.last().unwrap();
        assert!(
            latest_due <= start_batch_at
                && start_batch_at - latest_due < chrono::Duration::seconds(1)
        );
        match *policy {
            "fire_once" => assert_eq!(batch.len(), 1, "fire_once: one fire for all missed ones"),
            "catch_up" => {
                assert_eq!(batch.len(), 3, "catch_up: the latest catch_up_limit fires");
                assert!(
                    batch
                        .windows(2)
                        .all(|w| w[1] - w[0] == chrono::Duration::seconds(1))
                );
            }
            "skip" => assert!(
                batch
                    .iter()
                    .all(|t| start_batch_at - *t <= chrono::Duration::seconds(1)),
                "skip: only fires within the grace period"
            ),
            other => unreachable!("{other}"),
        }
        let in_outage = fire_times
            .iter()
            .filter(|t| **t > last_before && **t < batch[0])
            .count();
        assert_eq!(
            in_outage, 0,
            "{policy}: missed fires beyond the policy are not recorded"
        );
        // Every fire up to then ran, or was skipped by the policy: only a fire recorded
        // ahead before the stop, judged when the restarted node found it.
        let runs = wait::until(
            "every fire to be handled or skipped",
            Duration::from_secs(20),
            || async {
                let runs = api.runs(id).await;
                runs.iter()
                    .filter(|r| time(&r["fire_time"]) <= latest_due)
                    .all(|r| r["state"] == "succeeded" || r["state"] == "dead")
                    .then_some(runs)
            },
        )
        .await;
        let grace = chrono::Duration::seconds(1);
        let (mut late, mut in_outage) = (0, 0);
        for run in runs.iter().filter(|r| time(&r["fire_time"]) <= latest_due) {
            if run["state"] == "dead" {
                let error = run["error"].as_str().unwrap_or_default();
                assert!(error.starts_with("skipped:"), "{policy}: {run}");
                assert!(time(&run["created_at"]) < restarted_at, "{policy}: {run}");
                assert!(
                    time(&run["fire_time"]) < restarted_at - grace,
                    "{policy}: {run}"
                );
                assert_eq!(run["history"][0]["event"], "misfire_skipped", "{run}");
                continue;
            }
            if publish_delay(run) > grace + chrono::Duration::milliseconds(1500) {
                late += 1;
            }
            let fire_time = time(&run["fire_time"]);
            // (A clean stop may still publish fires it recorded ahead: not misfires.)
            let published_after = time(&run["dispatched_at"]) >= restarted_at;
            if published_after && fire_time > stopped_at && fire_time < restarted_at - grace {
                in_outage += 1;
            }
        }
        // Runs published after the restart for fires of the outage more than the grace
        // before it: recorded ahead before the stop, or by the timer's misfire plan.
        let bound = match *policy {
            "skip" => 0,
            "fire_once" => 1,
            _ => 3,
        };
        assert!(
            in_outage <= bound,
            "{policy}: {in_outage} fires of the outage ran: {runs:#?}"
        );
        // Judged by publish time, every run counts, those recorded before the stop too.
        match *policy {
            "skip" => assert_eq!(late, 0, "skip: no fire published late: {runs:#?}"),
            "fire_once" => assert!(late <= 1, "fire_once: one late fire at most: {runs:#?}"),
            "catch_up" => assert!(
                late <= 3,
                "catch_up: at most catch_up_limit late: {runs:#?}"
            ),
            other => unreachable!("{other}"),
        }
    }
    drop((chimed, db, vhost));
}

per_store!(
    missed_fires_follow_the_misfire_policy,
    missed_fires_follow_the_misfire_policy_after_a_clean_stop
);

/// SIGTERM: chimed stops firing, confirms what it recorded, and exits 0; nothing it
/// recorded that was due before the signal is left unpublished. Fires armed ahead of
/// their time stay `scheduled`, for the next start to publish at their time, never early;
/// one due while it shuts down may go either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_confirms_recorded_runs_and_exits_zero() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let api = s.chimed.api.clone();
    let mut ids = Vec::new();
    for i in 0..20 {
        let job = api
            .create_job(json!({"name": format!("j{i}"), "schedule": {"cron": "* * * * * *"}, "target": {"group": "quiet"}}))
            .await;
        ids.push(job["id"].as_str().unwrap().to_string());
    }
    wait::until(
        "every job to fire twice",
        Duration::from_secs(20),
        || async {
            for id in &ids {
                if api.runs(id).await.len() < 2 {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    let Setup { chimed, db, vhost } = s;
    let signalled = Utc::now();
    let status = chimed.stop().await;
    let stopped = Utc::now();
    assert!(status.success(), "chimed exits 0 on SIGTERM: {status:?}");

    let store = chime_scheduler::store::open(db.url()).await.unwrap();
    let (mut dispatched, mut armed) = (0, 0);
    for id in &ids {
        let runs = store
            .list_runs(
                id.parse().unwrap(),
                &chime_scheduler::store::RunPage {
                    before: None,
                    limit: 1000,
                },
            )
            .await
            .unwrap();
        for run in runs {
            use chime_scheduler::domain::RunState::{Dispatched, Scheduled};
            if run.fire_time > stopped {
                assert_eq!(
                    run.state, Scheduled,
                    "armed run {} was not published before its time",
                    run.id
                );
                armed += 1;
            } else if run.fire_time <= signalled {
                assert_eq!(
                    run.state, Dispatched,
                    "run {} was due before SIGTERM and confirmed before exit",
                    run.id
                );
                dispatched += 1;
            } else {
                // Due while chimed shut down: published if it came before the drain
                // began, else left for the next start. Either way never lost.
                assert!(
                    matches!(run.state, Dispatched | Scheduled),
                    "run {} due during shutdown is {:?}",
                    run.id,
                    run.state
                );
                if run.state == Dispatched {
                    dispatched += 1;
                } else {
                    armed += 1;
                }
            }
        }
    }
    eprintln!("{dispatched} runs confirmed before exit, {armed} left for the next start");
    let (ready, _) = vhost.queue_state("chime.group.quiet").await;
    assert_eq!(
        ready as usize, dispatched,
        "every dispatched run is in the queue, once"
    );
}
