//! Delivery modes end to end, each with several consumer instances as separate processes
//! on their own connections: one instance per fire (`group`), every live instance
//! (`broadcast`), one instance per zone (`zone`), N items per fire (`sharded`), and
//! read-only observers bound to the topic exchange.

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use chime_tests::{JobSpec, TestConsumer, api::metric, wait};
use chrono::{DateTime, Utc};
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{Setup, StoreKind};

fn every_second(name: &str, target: Value, extra: Value) -> Value {
    JobSpec::new("e2e", name)
        .every("1s")
        .target(target)
        .merge(&extra)
        .build()
}

fn id(v: &Value) -> String {
    v["id"].as_str().expect("an id").to_string()
}

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str().expect("a timestamp").parse().expect("RFC 3339")
}

/// Handler starts per task id, over all `consumers`.
fn starts_by_task(consumers: &[&TestConsumer]) -> HashMap<String, Vec<Value>> {
    let mut by_task: HashMap<String, Vec<Value>> = HashMap::new();
    for consumer in consumers {
        for event in consumer.events_of("started") {
            let task = event["task_id"].as_str().unwrap_or_default().to_string();
            by_task.entry(task).or_default().push(event);
        }
    }
    by_task
}

/// Pauses a job so no further fires are recorded.
async fn pause(s: &Setup, job_id: &str) {
    let (status, body) = s
        .chimed
        .api
        .call(Method::POST, &format!("/v1/jobs/{job_id}/pause"), None)
        .await;
    assert!(status.is_success(), "{body}");
}

/// Waits until every run of `job_id` is finished; returns them.
async fn settled_runs(s: &Setup, job_id: &str, what: &str) -> Vec<Value> {
    wait::until(what, Duration::from_secs(40), || async {
        let runs = s.chimed.api.runs(job_id).await;
        runs.iter()
            .all(|r| matches!(r["state"].as_str(), Some("succeeded" | "dead")))
            .then_some(runs)
    })
    .await
}

/// `group`: three instances share 300 fires; each fire runs exactly once in total, and
/// every instance takes a fair part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_fires_run_once_spread_over_instances() {
    let s = Setup::new(StoreKind::Postgres).await;
    let url = s.vhost.amqp_url();
    let consumers = [
        TestConsumer::start(&url, "workers", "w1", &[]).await,
        TestConsumer::start(&url, "workers", "w2", &[]).await,
        TestConsumer::start(&url, "workers", "w3", &[]).await,
    ];
    let mut jobs = Vec::new();
    for i in 0..50 {
        let job = s
            .chimed
            .api
            .create_job(every_second(
                &format!("g{i}"),
                json!({"group": "workers", "mode": "group"}),
                json!({"payload": {"sleep_ms": 5}}),
            ))
            .await;
        jobs.push(id(&job));
    }
    // Published fires: pausing withdraws the ones armed ahead and not yet published.
    wait::until("300 fires", Duration::from_secs(40), || async {
        let mut total = 0;
        for job in &jobs {
            let runs = s.chimed.api.runs(job).await;
            total += runs.iter().filter(|r| r["state"] != "scheduled").count();
        }
        (total >= 300).then_some(())
    })
    .await;
    for job in &jobs {
        pause(&s, job).await;
    }
    let mut runs = Vec::new();
    for job in &jobs {
        runs.extend(settled_runs(&s, job, "every group run to finish").await);
    }
    assert!(runs.len() >= 300, "{} fires", runs.len());
    let refs: Vec<&TestConsumer> = consumers.iter().collect();
    let starts = starts_by_task(&refs);
    let mut per_instance: HashMap<String, usize> = HashMap::new();
    for run in &runs {
        assert_eq!(run["state"], "succeeded", "{run}");
        assert_eq!(run["mode"], "group", "{run}");
        let handled = starts.get(&id(run)).map_or(0, Vec::len);
        assert_eq!(handled, 1, "fire {} ran {handled} times", id(run));
        *per_instance
            .entry(run["consumer"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    for consumer in &consumers {
        let share = per_instance.get(&consumer.instance).copied().unwrap_or(0);
        assert!(
            share * 10 >= runs.len(),
            "{} ran {share} of {} fires: {per_instance:?}",
            consumer.instance,
            runs.len()
        );
    }
}

/// `broadcast`: every live instance runs each fire; an instance joining later gets only
/// later fires; an instance that dies does not hold up later fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_reaches_every_live_instance() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let url = s.vhost.amqp_url();
    let b1 = TestConsumer::start(&url, "caches", "b1", &["--broadcast"]).await;
    let b2 = TestConsumer::start(&url, "caches", "b2", &["--broadcast"]).await;
    let b3 = TestConsumer::start(&url, "caches", "b3", &["--broadcast"]).await;
    let job = s
        .chimed
        .api
        .create_job(every_second(
            "refresh",
            json!({"group": "caches", "mode": "broadcast"}),
            json!({"ack_timeout": "1s", "run_timeout": "3s", "backoff": {"initial": "100ms"}}),
        ))
        .await;
    let job_id = id(&job);
    let all_three = ["b1", "b2", "b3"];
    let instances_of = |run: &Value| -> HashSet<String> {
        run["instances"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|r| r["state"] == "succeeded")
                    .map(|r| r["instance"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    // Three fires that reached all three instances.
    wait::until(
        "fires run by all 3 instances",
        Duration::from_secs(30),
        || async {
            let runs = s.chimed.api.runs(&job_id).await;
            let full = runs
                .iter()
                .filter(|r| {
                    r["state"] == "succeeded"
                        && instances_of(r) == all_three.iter().map(|s| s.to_string()).collect()
                })
                .count();
            (full >= 3).then_some(())
        },
    )
    .await;
    for consumer in [&b1, &b2, &b3] {
        assert!(!consumer.events_of("started").is_empty());
        assert_eq!(consumer.events_of("started")[0]["mode"], "broadcast");
    }

    // A fourth instance joins: it gets fires from now on, never earlier ones.
    let joined_at = Utc::now();
    let b4 = TestConsumer::start(&url, "caches", "b4", &["--broadcast"]).await;
    b4.wait_for("b4's first broadcast", Duration::from_secs(20), |events| {
        events.iter().any(|e| e["event"] == "finished")
    })
    .await;
    let first_seen = b4
        .events_of("started")
        .iter()
        .map(|e| time(&e["fire_time"]))
        .min()
        .unwrap();
    assert!(
        first_seen >= joined_at - chrono::Duration::milliseconds(500),
        "b4 got a fire from before it joined: {first_seen} < {joined_at}"
    );
    wait::until("a fire run by all 4", Duration::from_secs(20), || async {
        let runs = s.chimed.api.runs(&job_id).await;
        runs.iter()
            .any(|r| r["state"] == "succeeded" && instances_of(r).len() == 4)
            .then_some(())
    })
    .await;

    // One instance dies; later fires still complete, run by the other three.
    b2.kill().await;
    let killed_at = Utc::now();
    let later = wait::until(
        "two fires after the kill to succeed",
        Duration::from_secs(30),
        || async {
            let runs = s.chimed.api.runs(&job_id).await;
            let after: Vec<Value> = runs
                .into_iter()
                .filter(|r| time(&r["fire_time"]) > killed_at + chrono::Duration::seconds(1))
                .collect();
            (after.iter().filter(|r| r["state"] == "succeeded").count() >= 2).then_some(after)
        },
    )
    .await;
    for run in later.iter().filter(|r| r["state"] == "succeeded") {
        let expected: HashSet<String> = ["b1", "b3", "b4"].iter().map(|s| s.to_string()).collect();
        assert_eq!(instances_of(run), expected, "{run}");
    }
    let run = s.chimed.api.run(&id(&later[0])).await;
    assert_eq!(run["mode"], "broadcast");
    drop((b1, b3, b4));
}

/// `zone`: each fire runs once in each zone, on an instance of that zone, also when one
/// instance of a zone dies; a zone job without a zone list runs in every live zone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zone_fires_run_once_per_zone() {
    let s = Setup::new(StoreKind::Postgres).await;
    let url = s.vhost.amqp_url();
    let a1 = TestConsumer::start(&url, "redis", "a1", &["--zone", "dc1"]).await;
    let a2 = TestConsumer::start(&url, "redis", "a2", &["--zone", "dc1"]).await;
    let c1 = TestConsumer::start(&url, "redis", "c1", &["--zone", "dc2"]).await;
    let c2 = TestConsumer::start(&url, "redis", "c2", &["--zone", "dc2"]).await;
    let listed = s
        .chimed
        .api
        .create_job(every_second(
            "warm",
            json!({"group": "redis", "mode": "zone", "zones": ["dc1", "dc2"]}),
            json!({"payload": {"sleep_ms": 200}}),
        ))
        .await;
    let listed_id = id(&listed);
    let zone_of = |instance: &str| {
        if instance.starts_with('a') {
            "dc1"
        } else {
            "dc2"
        }
    };
    wait::until("4 fires in both zones", Duration::from_secs(30), || async {
        let runs = s.chimed.api.runs(&listed_id).await;
        (runs.iter().filter(|r| r["state"] == "succeeded").count() >= 8).then_some(())
    })
    .await;
    // Kill one dc1 instance; dc1's items keep being done by the other.
    a1.kill().await;
    let killed_at = Utc::now();
    wait::until(
        "dc1 items after the kill",
        Duration::from_secs(30),
        || async {
            let runs = s.chimed.api.runs(&listed_id).await;
            let after = runs
                .iter()
                .filter(|r| {
                    r["zone"] == "dc1"
                        && r["state"] == "succeeded"
                        && time(&r["fire_time"]) > killed_at + chrono::Duration::seconds(1)
                })
                .count();
            (after >= 3).then_some(())
        },
    )
    .await;
    // Without a list: every zone that has live consumers.
    let live = s
        .chimed
        .api
        .create_job(every_second(
            "warm-live",
            json!({"group": "redis", "mode": "zone"}),
            json!({}),
        ))
        .await;
    let live_id = id(&live);
    wait::until("live-zone fires", Duration::from_secs(30), || async {
        let runs = s.chimed.api.runs(&live_id).await;
        let zones: HashSet<&str> = runs
            .iter()
            .filter(|r| r["state"] == "succeeded")
            .filter_map(|r| r["zone"].as_str())
            .collect();
        (zones.len() == 2).then_some(())
    })
    .await;
    pause(&s, &listed_id).await;
    pause(&s, &live_id).await;
    let mut runs = settled_runs(&s, &listed_id, "every zone item to finish").await;
    runs.extend(settled_runs(&s, &live_id, "every live-zone item to finish").await);

    let starts = starts_by_task(&[&a2, &c1, &c2]);
    let mut fires: HashMap<(String, String), Vec<String>> = HashMap::new();
    for run in &runs {
        assert_eq!(run["state"], "succeeded", "{run}");
        assert_eq!(run["mode"], "zone", "{run}");
        let zone = run["zone"].as_str().expect("a zone item").to_string();
        let consumer = run["consumer"].as_str().unwrap();
        assert_eq!(zone_of(consumer), zone, "ran in its own zone: {run}");
        if consumer != "a1" {
            let handled = starts.get(&id(run)).map_or(0, Vec::len);
            assert_eq!(
                handled,
                1,
                "item {} of zone {zone} ran {handled} times",
                id(run)
            );
        }
        fires
            .entry((
                run["job_id"].as_str().unwrap().to_string(),
                run["fire_time"].as_str().unwrap().to_string(),
            ))
            .or_default()
            .push(zone);
    }
    for ((_, fire_time), mut zones) in fires {
        zones.sort();
        assert_eq!(
            zones,
            ["dc1", "dc2"],
            "the fire at {fire_time} ran once per zone"
        );
    }
}

/// `sharded`: eight items per fire spread over three instances, each run once; a failed
/// item is retried alone and the fire completes when all eight have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_fire_runs_every_item_once() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let url = s.vhost.amqp_url();
    let consumers = [
        TestConsumer::start(&url, "batch", "s1", &[]).await,
        TestConsumer::start(&url, "batch", "s2", &[]).await,
        TestConsumer::start(&url, "batch", "s3", &[]).await,
    ];
    let job = s
        .chimed
        .api
        .create_job(json!({
            "app": "e2e", "name": "statements", "schedule": {"every": "1h"},
            "target": {"group": "batch", "mode": "sharded", "shards": 8},
            "payload": {"fail_shard": 3, "sleep_ms": 100},
            "backoff": {"initial": "200ms", "max": "1s"},
        }))
        .await;
    let job_id = id(&job);
    assert_eq!(job["target"]["shards"], 8);
    let fired = s.chimed.api.trigger(&job_id).await;
    let fire_time = fired["fire_time"].clone();
    let items = wait::until(
        "all 8 items to succeed",
        Duration::from_secs(30),
        || async {
            let runs = s.chimed.api.runs(&job_id).await;
            let items: Vec<Value> = runs
                .into_iter()
                .filter(|r| r["fire_time"] == fire_time)
                .collect();
            (items.len() == 8 && items.iter().all(|r| r["state"] == "succeeded")).then_some(items)
        },
    )
    .await;
    let mut shards: Vec<u64> = items.iter().map(|r| r["shard"].as_u64().unwrap()).collect();
    shards.sort();
    assert_eq!(shards, (0..8).collect::<Vec<u64>>());
    let ids: HashSet<String> = items.iter().map(id).collect();
    assert_eq!(ids.len(), 8, "each item has its own idempotency key");
    for item in &items {
        assert_eq!(item["shard_total"], 8);
        let expected_attempts = if item["shard"] == 3 { 2 } else { 1 };
        assert_eq!(
            item["attempt"], expected_attempts,
            "only the failed item is retried: {item}"
        );
    }
    let refs: Vec<&TestConsumer> = consumers.iter().collect();
    let starts = starts_by_task(&refs);
    for item in &items {
        let runs = starts.get(&id(item)).map_or(0, Vec::len);
        let expected = if item["shard"] == 3 { 2 } else { 1 };
        assert_eq!(runs, expected, "item {item}");
        for start in &starts[&id(item)] {
            assert_eq!(start["shard"], item["shard"]);
            assert_eq!(start["shard_total"], 8);
        }
    }
    let busy: HashSet<&str> = items
        .iter()
        .filter_map(|r| r["consumer"].as_str())
        .collect();
    assert!(busy.len() >= 2, "items spread over instances: {busy:?}");
    // The whole fire, seen from any item.
    let run = s.chimed.api.run(&id(&items[0])).await;
    assert_eq!(run["fire_state"], "succeeded", "{run}");
    assert_eq!(run["items"].as_array().map(Vec::len), Some(8), "{run}");
}

/// An observer bound with a pattern registers it, gets a copy of each task it matches
/// and changes nothing; a task no registered pattern matches gets no copy at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_see_copies_and_change_nothing() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let url = s.vhost.amqp_url();
    let watcher = TestConsumer::start(&url, "unused", "audit", &["--observe", "e2e.*"]).await;
    let elsewhere =
        TestConsumer::start(&url, "unused", "audit-other", &["--observe", "other.*"]).await;
    let worker = TestConsumer::start(&url, "mail", "m1", &[]).await;
    wait::until(
        "both observers registered",
        Duration::from_secs(20),
        || async {
            let text = s.chimed.api.metrics().await;
            (metric(&text, "chime_observed_patterns") == 2.0).then_some(())
        },
    )
    .await;
    let job = s
        .chimed
        .api
        .create_job(every_second("digest", json!({"group": "mail"}), json!({})))
        .await;
    let job_id = id(&job);
    let mut unwatched = every_second("quiet", json!({"group": "mail"}), json!({}));
    unwatched["app"] = json!("unwatched");
    let unwatched_id = id(&s.chimed.api.create_job(unwatched).await);
    wait::until("3 observed copies", Duration::from_secs(30), || async {
        (watcher.events_of("observed").len() >= 3).then_some(())
    })
    .await;
    pause(&s, &job_id).await;
    pause(&s, &unwatched_id).await;
    let runs = settled_runs(&s, &job_id, "the observed job's runs to finish").await;
    let quiet = settled_runs(&s, &unwatched_id, "the unwatched job's runs to finish").await;
    assert!(!quiet.is_empty(), "the unwatched job fired too");
    let copies = metric(&s.chimed.api.metrics().await, "chime_topic_copies_total");
    assert_eq!(
        copies,
        runs.len() as f64,
        "one copy per publish of the observed job, none for the unwatched one"
    );
    let observed: HashSet<String> = watcher
        .events_of("observed")
        .iter()
        .map(|e| e["task_id"].as_str().unwrap().to_string())
        .collect();
    for run in &runs {
        assert_eq!(run["state"], "succeeded", "{run}");
        assert_eq!(run["consumer"], "m1", "only the worker answers: {run}");
        assert_eq!(run["attempt"], 1, "{run}");
        assert!(run["history"].as_array().is_none_or(Vec::is_empty), "{run}");
    }
    let run_ids: HashSet<String> = runs.iter().map(id).collect();
    assert!(
        observed.is_subset(&run_ids) && !observed.is_empty(),
        "copies are of this job's tasks"
    );
    for event in watcher.events_of("observed") {
        assert_eq!(
            (event["app"].as_str(), event["job"].as_str()),
            (Some("e2e"), Some("digest"))
        );
    }
    assert!(
        elsewhere.events_of("observed").is_empty(),
        "other.* matches nothing here"
    );
    assert_eq!(
        worker.events_of("started").len(),
        runs.len() + quiet.len(),
        "the worker ran each fire of both jobs once"
    );
}
