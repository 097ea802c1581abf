//! Human-readable tables for `chimectl`.

use chime_consumer::protocol::AttemptRecord;
use comfy_table::{Table, presets::NOTHING};

use super::schedule_text;
use crate::{
    api::dto::{ClusterResponse, InstanceResponse, ItemResponse, JobResponse, RunResponse},
    domain::{DeliveryMode, Target, shard::shard_ranges as ranges, timestamp::timestamp},
};

pub(super) fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_preset(NOTHING)
        .set_header(header.iter().copied());
    table
}

/// The next fire as a list shows it: `finished` for a job whose schedule fires no more
/// (past its `end_at`, or exhausted), `paused` for a paused job (its stored next fire is
/// the one it had when paused, not one that will happen).
fn next_fire(job: &JobResponse) -> String {
    if job.finished {
        "finished".into()
    } else if job.spec.paused {
        "paused".into()
    } else {
        or_dash(job.next_fire_at.as_deref())
    }
}

/// `group`, `broadcast`, `sharded(8)`, `zone(dc1,dc2)`, or `zone(live)` for every zone
/// with live consumers.
pub fn mode(target: &Target) -> String {
    match (target.mode, &target.zones, target.shards) {
        (DeliveryMode::Sharded, _, Some(n)) => format!("sharded({n})"),
        (DeliveryMode::Zone, Some(zones), _) => format!("zone({})", zones.join(",")),
        (DeliveryMode::Zone, None, _) => "zone(live)".into(),
        (mode, _, _) => mode.as_str().into(),
    }
}

pub(super) fn or_dash(value: Option<&str>) -> String {
    value.unwrap_or("-").to_string()
}

pub(super) fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        format!("{}…", text.chars().take(max - 1).collect::<String>())
    }
}

/// Jobs, one per line.
pub fn jobs(jobs: &[JobResponse]) -> String {
    let mut t = table(&[
        "ID",
        "APP",
        "NAME",
        "SCHEDULE",
        "GROUP",
        "MODE",
        "PAUSED",
        "NEXT FIRE",
    ]);
    for job in jobs {
        t.add_row(vec![
            job.id.to_string(),
            job.spec.app.clone(),
            job.spec.name.clone(),
            schedule_text::summary(&job.spec.schedule),
            job.spec.target.group.clone(),
            shorten(&mode(&job.spec.target), 40),
            job.spec.paused.to_string(),
            next_fire(job),
        ]);
    }
    format!("{t}\n")
}

/// One job, field by field; a cron schedule with its fields by name and next fires.
pub fn job_detail(job: &JobResponse) -> String {
    let mut t = Table::new();
    t.load_preset(NOTHING);
    let s = &job.spec;
    let mut rows = vec![
        ("id", job.id.to_string()),
        ("app", s.app.clone()),
        ("name", s.name.clone()),
        ("schedule", schedule_text::summary(&s.schedule)),
    ];
    rows.extend(schedule_text::detail_rows(
        &s.schedule,
        s.paused,
        chrono::Utc::now(),
    ));
    rows.extend([
        ("group", s.target.group.clone()),
        ("mode", mode(&s.target)),
        ("payload", s.payload.to_string()),
        ("ack_timeout", s.ack_timeout.clone()),
        ("run_timeout", s.run_timeout.clone()),
        ("max_attempts", s.max_attempts.to_string()),
        (
            "backoff",
            format!("{} doubling to {}", s.backoff.initial, s.backoff.max),
        ),
        ("misfire", name_of(&s.misfire)),
        ("catch_up_limit", s.catch_up_limit.to_string()),
        ("overlap", name_of(&s.overlap)),
        ("start_at", or_dash(s.start_at.as_deref())),
        ("end_at", or_dash(s.end_at.as_deref())),
        ("jitter", or_dash(s.jitter.as_deref())),
        (
            "pause_after_failures",
            s.pause_after_failures
                .map_or_else(|| "never".to_string(), |n| n.to_string()),
        ),
        ("paused", s.paused.to_string()),
        (
            "paused_reason",
            s.paused_reason.clone().unwrap_or_else(|| "-".to_string()),
        ),
        ("version", job.version.to_string()),
        ("next_fire_at", next_fire(job)),
        ("created_at", job.created_at.clone()),
        ("updated_at", job.updated_at.clone()),
    ]);
    for (key, value) in rows {
        t.add_row(vec![key.to_string(), value]);
    }
    format!("{t}\n")
}

/// A value's name in the API (`fire_once`, `forbid`, ...).
fn name_of(value: &impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

pub(super) fn result_text(run: &RunResponse) -> String {
    match (&run.output, &run.error) {
        (_, Some(error)) => format!("error: {error}"),
        (Some(output), None) => output.to_string(),
        (None, None) => "-".into(),
    }
}

/// Runs, one per line.
pub fn runs(runs: &[RunResponse]) -> String {
    let mut t = table(&[
        "RUN",
        "FIRE TIME",
        "TRIGGER",
        "ATTEMPT",
        "STATE",
        "CONSUMER",
        "FINISHED",
        "RESULT",
    ]);
    for run in runs {
        t.add_row(vec![
            run.id.to_string(),
            run.fire_time.clone(),
            name_of(&run.trigger),
            run.attempt.to_string(),
            run.state.to_string(),
            or_dash(run.consumer.as_deref()),
            or_dash(run.finished_at.as_deref()),
            shorten(&result_text(run), 60),
        ]);
    }
    format!("{t}\n")
}

/// One run, field by field; then, for a fire of several items, one line per item, and
/// for a broadcast run, one line per consumer instance.
pub fn run_detail(run: &RunResponse) -> String {
    let mut t = Table::new();
    t.load_preset(NOTHING);
    let mut rows = vec![
        ("id", run.id.to_string()),
        ("job_id", run.job_id.to_string()),
        ("fire_time", run.fire_time.clone()),
        ("state", run.state.to_string()),
        ("attempt", run.attempt.to_string()),
        ("mode", run.mode.as_str().to_string()),
        ("shard", format!("{}/{}", run.shard, run.shard_total)),
    ];
    if let Some(zone) = &run.zone {
        rows.push(("zone", zone.clone()));
    }
    let items = run.items.as_deref().filter(|items| items.len() > 1);
    if let (Some(items), Some(fire)) = (items, run.fire_state) {
        rows.push(("fire", format!("{} ({} items)", fire.as_str(), items.len())));
    }
    rows.extend([
        ("created_at", run.created_at.clone()),
        ("dispatched_at", or_dash(run.dispatched_at.as_deref())),
        ("acked_at", or_dash(run.acked_at.as_deref())),
        ("finished_at", or_dash(run.finished_at.as_deref())),
        ("consumer", or_dash(run.consumer.as_deref())),
        ("fired_by", or_dash(run.fired_by.as_deref())),
    ]);
    if let Some(by) = &run.cancelled_by {
        rows.push(("cancelled_by", by.clone()));
    }
    rows.extend([
        ("payload", run.payload.to_string()),
        (
            "output",
            run.output.as_ref().map_or("-".into(), |o| o.to_string()),
        ),
        ("error", or_dash(run.error.as_deref())),
    ]);
    for (key, value) in rows {
        t.add_row(vec![key.to_string(), value]);
    }
    let mut text = format!("{t}\n");
    if !run.history.is_empty() {
        text.push_str(&format!(
            "\nearlier attempts (each that did not succeed):\n{}",
            attempts(&run.history)
        ));
    }
    if let Some(items) = items {
        text.push_str(&format!(
            "\nitems of this fire (* = this run):\n{}",
            fire_items(run, items)
        ));
    }
    if run.mode == DeliveryMode::Broadcast {
        text.push_str(&if run.instances.is_empty() {
            "\ninstances: none has acked\n".to_string()
        } else {
            format!("\ninstances:\n{}", instances(&run.instances))
        });
    }
    text
}

/// A run's attempt history, one attempt per line: what happened, when, on which consumer,
/// the error, and when the retry was due.
fn attempts(history: &[AttemptRecord]) -> String {
    let mut t = table(&["ATTEMPT", "EVENT", "AT", "CONSUMER", "ERROR", "RETRY AT"]);
    for record in history {
        t.add_row(vec![
            record.attempt.to_string(),
            record.event.clone(),
            timestamp(record.at),
            or_dash(record.consumer.as_deref()),
            shorten(record.error.as_deref().unwrap_or("-"), 60),
            record.retry_at.map_or("-".into(), timestamp),
        ]);
    }
    format!("{t}\n")
}

/// The items of `run`'s fire, one per line: the shard (or zone) marked `*` for `run`.
fn fire_items(run: &RunResponse, items: &[ItemResponse]) -> String {
    let by_zone = run.mode == DeliveryMode::Zone;
    let mut t = table(&[
        if by_zone { "ZONE" } else { "SHARD" },
        "STATE",
        "ATTEMPT",
        "CONSUMER",
        "RUN",
    ]);
    for item in items {
        let name = match (&item.zone, by_zone) {
            (Some(zone), true) => zone.clone(),
            _ => item.shard.to_string(),
        };
        let this = if item.id == run.id { " *" } else { "" };
        t.add_row(vec![
            format!("{name}{this}"),
            item.state.to_string(),
            item.attempt.to_string(),
            or_dash(item.consumer.as_deref()),
            item.id.to_string(),
        ]);
    }
    format!("{t}\n")
}

/// A broadcast run's consumer instances, one per line.
fn instances(instances: &[InstanceResponse]) -> String {
    let mut t = table(&["INSTANCE", "STATE", "ATTEMPT", "FINISHED", "RESULT"]);
    for instance in instances {
        let result = match (&instance.error, &instance.output) {
            (Some(error), _) => format!("error: {error}"),
            (None, Some(output)) => output.to_string(),
            (None, None) => "-".into(),
        };
        t.add_row(vec![
            instance.instance.clone(),
            name_of(&instance.state),
            instance.attempt.to_string(),
            or_dash(instance.finished_at.as_deref()),
            shorten(&result, 60),
        ]);
    }
    format!("{t}\n")
}

/// What `job trigger` says: the run, and how many items the fire has when more than one.
pub fn triggered(job: &str, run: &RunResponse) -> String {
    let items = run.items.as_ref().map_or(1, Vec::len);
    let more = if items > 1 {
        format!(", the first of {items} items")
    } else {
        String::new()
    };
    format!("triggered job {job}: run {} ({}{more})", run.id, run.state)
}

/// The cluster: one line per node, with its shards as ranges.
pub fn cluster(status: &ClusterResponse) -> String {
    let mut t = table(&["NODE", "LIVE", "SHARDS", "RANGES", "HEARTBEAT", "ADDRESS"]);
    for node in &status.nodes {
        let this = if node.id == status.this_node {
            " *"
        } else {
            ""
        };
        t.add_row(vec![
            format!("{}{this}", node.id),
            if node.live { "yes" } else { "no" }.to_string(),
            node.shards.len().to_string(),
            shorten(&ranges(&node.shards), 60),
            node.heartbeat_at.clone(),
            if node.http_addr.is_empty() {
                "-".into()
            } else {
                node.http_addr.clone()
            },
        ]);
    }
    let unowned = if status.unowned_shards.is_empty() {
        String::new()
    } else {
        format!("unowned shards: {}\n", ranges(&status.unowned_shards))
    };
    format!(
        "{} store, {} shards, lease TTL {}s (* = the node that answered)\n{t}\n{unowned}",
        status.backend, status.shard_count, status.lease_ttl_s
    )
}

#[cfg(test)]
mod tests;
