//! Flags into request bodies: `job add`'s whole job and `job edit`'s patch.

use chrono::Utc;
use clap::Parser;
use serde_json::{Value, json};

use crate::{
    api::dto::{JobRequest, JobResponse},
    cli::{Cli, Command, JobCommand},
    domain::Job,
};

fn parse(argv: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(["chimectl"].iter().chain(argv))
}

fn add(args: &[&str]) -> anyhow::Result<Value> {
    let argv = [&["job", "add", "--name", "n", "--group", "g"], args].concat();
    let Command::Job(JobCommand::Add(add)) = parse(&argv).unwrap().command else {
        panic!("parsed as job add")
    };
    add.to_request(&mut std::io::empty())
}

/// A job as the API would return it, from a request body.
fn job(body: Value) -> JobResponse {
    let request: JobRequest = serde_json::from_value(body).unwrap();
    JobResponse::from(&Job::new(request.into_spec(1024).unwrap(), Utc::now()))
}

fn edit(current: &JobResponse, args: &[&str]) -> anyhow::Result<Value> {
    let argv = [&["job", "edit", "shop/n"], args].concat();
    let Command::Job(JobCommand::Edit(edit)) = parse(&argv).unwrap().command else {
        panic!("parsed as job edit")
    };
    edit.to_patch(current, &mut std::io::empty())
}

#[test]
fn delivery_flags_go_into_the_target() {
    let target =
        |args: &[&str]| add(&[&["--every", "1m"], args].concat()).unwrap()["target"].clone();
    assert_eq!(target(&[]), json!({"group": "g"}));
    assert_eq!(
        target(&["--mode", "sharded", "--shards", "8"]),
        json!({"group": "g", "mode": "sharded", "shards": 8})
    );
    assert_eq!(
        target(&["--mode", "zone", "--zones", "dc1,dc2"]),
        json!({"group": "g", "mode": "zone", "zones": ["dc1", "dc2"]})
    );
    // Validation is the server's: a mismatch is passed on as given.
    assert_eq!(
        target(&["--shards", "0"]),
        json!({"group": "g", "shards": 0})
    );
}

#[test]
fn add_has_a_flag_for_every_field_and_the_api_takes_the_result() {
    let body = add(&[
        "--app",
        "shop",
        "--cron",
        "0 0 3 * * *",
        "--timezone",
        "Europe/Berlin",
        "--payload",
        r#"{"rows": 3}"#,
        "--ack-timeout",
        "45s",
        "--run-timeout",
        "20m",
        "--max-attempts",
        "7",
        "--backoff-initial",
        "2s",
        "--backoff-max",
        "10m",
        "--misfire",
        "catch_up",
        "--catch-up-limit",
        "4",
        "--overlap",
        "forbid",
        "--paused",
    ])
    .unwrap();
    assert_eq!(
        body,
        json!({
            "app": "shop", "name": "n", "target": {"group": "g"},
            "schedule": {"cron": "0 0 3 * * *", "timezone": "Europe/Berlin"},
            "payload": {"rows": 3}, "ack_timeout": "45s", "run_timeout": "20m",
            "max_attempts": 7, "backoff": {"initial": "2s", "max": "10m"},
            "misfire": "catch_up", "catch_up_limit": 4, "overlap": "forbid", "paused": true,
        })
    );
    let created = job(body);
    assert_eq!(created.spec.run_timeout, "20m");
    assert_eq!(created.spec.backoff.max.to_string(), "10m");
}

#[test]
fn every_field_of_the_api_has_an_add_flag() {
    let from_flags = add(&[
        "--app",
        "a",
        "--every",
        "1m",
        "--payload",
        "1",
        "--ack-timeout",
        "1s",
        "--run-timeout",
        "1m",
        "--max-attempts",
        "1",
        "--backoff-initial",
        "1s",
        "--misfire",
        "skip",
        "--catch-up-limit",
        "1",
        "--overlap",
        "allow",
        "--start-at",
        "2030-01-01T00:00:00Z",
        "--end-at",
        "2030-02-01T00:00:00Z",
        "--jitter",
        "5s",
        "--pause-after-failures",
        "1",
        "--paused",
    ])
    .unwrap();
    // The request that recreates a job names every field the API takes.
    let spec = serde_json::from_value::<JobRequest>(from_flags.clone())
        .unwrap()
        .into_spec(1024)
        .unwrap();
    let every_field = serde_json::to_value(JobRequest::from_spec(&spec)).unwrap();
    for key in every_field.as_object().unwrap().keys() {
        assert!(
            from_flags.get(key).is_some(),
            "job add has no flag for {key}"
        );
    }
}

#[test]
fn timezone_goes_only_with_cron() {
    for schedule in [["--every", "1m"], ["--at", "2030-01-01T00:00:00Z"]] {
        let argv = [
            &[
                "job",
                "add",
                "--name",
                "n",
                "--group",
                "g",
                "--timezone",
                "UTC",
            ],
            &schedule[..],
        ]
        .concat();
        let error = parse(&argv).unwrap_err().to_string();
        assert!(
            error.contains("--timezone") && error.contains("cannot be used with"),
            "{error}"
        );
    }
    let error = add(&["--timezone", "UTC"]).unwrap_err().to_string();
    assert!(error.contains("--timezone goes with --cron"), "{error}");
}

#[test]
fn edit_sets_or_removes_the_window_and_jitter() {
    let current = job(json!({
        "name": "n", "target": {"group": "g"}, "schedule": {"every": "1m"},
        "end_at": "2030-01-01T00:00:00Z", "jitter": "5s",
    }));
    assert_eq!(
        edit(
            &current,
            &[
                "--start-at",
                "2029-01-01T00:00:00Z",
                "--end-at",
                "none",
                "--jitter",
                "none"
            ]
        )
        .unwrap(),
        json!({"start_at": "2029-01-01T00:00:00Z", "end_at": null, "jitter": null})
    );
}

#[test]
fn edit_sends_only_what_the_flags_name() {
    let current = job(json!({
        "app": "shop", "name": "n", "target": {"group": "g"},
        "schedule": {"cron": "0 0 3 * * *", "timezone": "Europe/Berlin"},
    }));
    assert_eq!(
        edit(&current, &["--max-attempts", "9", "--overlap", "forbid"]).unwrap(),
        json!({"max_attempts": 9, "overlap": "forbid"})
    );
    assert_eq!(
        edit(&current, &["--overlap", "buffer_one"]).unwrap(),
        json!({"overlap": "buffer_one"})
    );
    assert_eq!(
        edit(&current, &["--pause-after-failures", "3"]).unwrap(),
        json!({"pause_after_failures": 3})
    );
    // 0 turns it off: null clears the field.
    assert_eq!(
        edit(&current, &["--pause-after-failures", "0"]).unwrap(),
        json!({"pause_after_failures": null})
    );
    // A new expression keeps the job's timezone; a new timezone keeps its expression.
    assert_eq!(
        edit(&current, &["--cron", "0 30 4 * * *"]).unwrap(),
        json!({"schedule": {"cron": "0 30 4 * * *", "timezone": "Europe/Berlin"}})
    );
    assert_eq!(
        edit(&current, &["--timezone", "Asia/Tokyo"]).unwrap(),
        json!({"schedule": {"cron": "0 0 3 * * *", "timezone": "Asia/Tokyo"}})
    );
    assert_eq!(
        edit(&current, &["--every", "5m"]).unwrap(),
        json!({"schedule": {"every": "5m"}})
    );
    // The API replaces a backoff whole: the half not given keeps the job's value.
    assert_eq!(
        edit(&current, &["--backoff-max", "1h"]).unwrap(),
        json!({"backoff": {"initial": "1s", "max": "1h"}})
    );
    assert_eq!(
        edit(&current, &["--name", "renamed"]).unwrap(),
        json!({"name": "renamed"})
    );
    let nothing = edit(&current, &[]).unwrap_err().to_string();
    assert!(nothing.contains("nothing to change"), "{nothing}");
}

#[test]
fn edit_timezone_of_a_job_without_cron_is_an_error() {
    let current = job(json!({"name": "n", "target": {"group": "g"}, "schedule": {"every": "1m"}}));
    let error = edit(&current, &["--timezone", "UTC"])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("--timezone applies to cron schedules") && error.contains("every 1m"),
        "{error}"
    );
    let argv = ["job", "edit", "n", "--every", "1m", "--timezone", "UTC"];
    assert!(parse(&argv).is_err(), "--timezone with --every is refused");
}

#[test]
fn edit_target_keeps_what_the_mode_still_uses() {
    let sharded = job(json!({
        "name": "n", "schedule": {"every": "1m"},
        "target": {"group": "g", "mode": "sharded", "shards": 8},
    }));
    assert_eq!(
        edit(&sharded, &["--group", "billing"]).unwrap()["target"],
        json!({"group": "billing", "mode": "sharded", "shards": 8})
    );
    assert_eq!(
        edit(&sharded, &["--mode", "group"]).unwrap()["target"],
        json!({"group": "g", "mode": "group"})
    );
    let zoned = job(json!({
        "name": "n", "schedule": {"every": "1m"},
        "target": {"group": "g", "mode": "zone", "zones": ["dc1"]},
    }));
    assert_eq!(
        edit(&zoned, &["--zones", "dc1,dc2"]).unwrap()["target"],
        json!({"group": "g", "mode": "zone", "zones": ["dc1", "dc2"]})
    );
    // Whatever the flags ask, the API accepts the merged body.
    for args in [
        &["--group", "billing"][..],
        &["--mode", "group"],
        &["--shards", "4"],
    ] {
        let patch = edit(&sharded, args).unwrap();
        let mut merged = serde_json::to_value(JobRequest::from_spec(
            &serde_json::from_value::<JobRequest>(json!({
                "name": "n", "schedule": {"every": "1m"},
                "target": {"group": "g", "mode": "sharded", "shards": 8},
            }))
            .unwrap()
            .into_spec(1024)
            .unwrap(),
        ))
        .unwrap();
        for (key, value) in patch.as_object().unwrap() {
            merged[key] = value.clone();
        }
        let request: JobRequest = serde_json::from_value(merged).unwrap();
        assert!(request.into_spec(1024).is_ok(), "{args:?}");
    }
}

#[test]
fn edit_and_add_refuse_file_with_flags() {
    assert!(parse(&["job", "edit", "n", "-f", "x.json", "--every", "1m"]).is_err());
    assert!(parse(&["job", "add", "-f", "x.json", "--group", "g"]).is_err());
}
