//! `chimectl job add` and `job edit` flags: one flag per job field (shared by both), or
//! a JSON file as the API takes it. `add` builds a whole job; `edit` builds the `PATCH`
//! body of the fields named, merged with the job as read where the API replaces a whole
//! value (schedule, target, backoff), so a flag changes only what it names.

use std::{io::BufRead, path::Path, path::PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Map, Value, json};

use super::terminal::read_source;
use crate::api::dto::JobResponse;

/// The job fields, as flags. Every one is optional: `add` fills defaults, `edit` keeps
/// the job's value.
#[derive(Debug, Default, Args)]
#[group(id = "job_fields", multiple = true)]
pub struct JobFlags {
    /// Cron expression, seconds first: "0 */2 * * * *" (a 5-field Unix line runs at
    /// second 0).
    #[arg(long, conflicts_with_all = ["every", "at"])]
    pub cron: Option<String>,
    /// IANA timezone of the cron schedule, e.g. Europe/Berlin (default UTC). Only with
    /// cron schedules.
    #[arg(long, conflicts_with_all = ["every", "at"])]
    pub timezone: Option<String>,
    /// Fixed interval: "30s", "5m".
    #[arg(long, conflicts_with = "at")]
    pub every: Option<String>,
    /// One-shot instant, RFC 3339: "2026-11-21T10:00:00Z".
    #[arg(long)]
    pub at: Option<String>,
    /// Consumer group the tasks go to.
    #[arg(long)]
    pub group: Option<String>,
    /// Delivery mode: group (one instance runs each fire; the default), broadcast (every
    /// live instance), zone (one instance per zone) or sharded (--shards items per fire).
    #[arg(long)]
    pub mode: Option<String>,
    /// Zone mode: the zones that each run every fire, comma-separated ("dc1,dc2");
    /// without it, every zone with live consumers.
    #[arg(long, value_delimiter = ',')]
    pub zones: Option<Vec<String>>,
    /// Sharded mode: items per fire (1 to 1024).
    #[arg(long)]
    pub shards: Option<u32>,
    /// Payload JSON handed to the handler.
    #[arg(long)]
    pub payload: Option<String>,
    /// How long a consumer has to ack a task before it is published again (default 30s).
    #[arg(long)]
    pub ack_timeout: Option<String>,
    /// How long a run may go without a result or heartbeat after its ack (default 5m).
    #[arg(long)]
    pub run_timeout: Option<String>,
    /// Delivery attempts before a run is given up (default 5).
    #[arg(long)]
    pub max_attempts: Option<u32>,
    /// Delay before the first retry of a retryable failure (default 1s); it doubles per
    /// attempt up to --backoff-max.
    #[arg(long)]
    pub backoff_initial: Option<String>,
    /// Longest delay between retries (default 5m).
    #[arg(long)]
    pub backoff_max: Option<String>,
    /// Misfire policy for fires missed while Chime was down: fire_once (default), skip or
    /// catch_up.
    #[arg(long)]
    pub misfire: Option<String>,
    /// Most missed fires catch_up replays (default 10).
    #[arg(long)]
    pub catch_up_limit: Option<u32>,
    /// Overlap policy: allow (default), forbid (skip a fire while the last run is
    /// unfinished) or buffer_one (hold one such fire until it finished, skip the rest).
    #[arg(long)]
    pub overlap: Option<String>,

    // Fire window and jitter (issue 38).
    /// No scheduled fire before this instant, RFC 3339 ("2026-12-01T08:00:00Z"); "none"
    /// removes it (edit).
    #[arg(long)]
    pub start_at: Option<String>,
    /// No scheduled fire after this instant, RFC 3339; past it the job is finished.
    /// "none" removes it (edit).
    #[arg(long)]
    pub end_at: Option<String>,
    /// Delay each scheduled fire's publish by a deterministic amount up to this ("30s";
    /// at most 1h); "none" removes it (edit).
    #[arg(long)]
    pub jitter: Option<String>,
    /// Pause the job after this many consecutive failed (dead) runs, 1 to 1000; 0 turns
    /// pausing on failure off (the default).
    #[arg(long, value_name = "N")]
    pub pause_after_failures: Option<u32>,
}

/// Flags of `job add`: `--file`, or `--name`, a schedule and `--group`.
#[derive(Debug, Args)]
pub struct AddArgs {
    /// The job as JSON (as `POST /v1/jobs` takes it); `-` reads standard input.
    #[arg(short, long, conflicts_with_all = ["job_fields", "name", "app", "paused"])]
    pub file: Option<PathBuf>,
    /// Job name, unique within the app.
    #[arg(long)]
    pub name: Option<String>,
    /// App namespace (default "default").
    #[arg(long)]
    pub app: Option<String>,
    /// The job's fields.
    #[command(flatten)]
    pub fields: JobFlags,
    /// Create the job paused.
    #[arg(long)]
    pub paused: bool,
}

/// Flags of `job edit`: the fields to change, or `--file`. To pause or resume, use
/// `job pause` and `job resume`.
#[derive(Debug, Args)]
pub struct EditArgs {
    /// The job: an id, app/name, or a name in app "default".
    pub job: String,
    /// The fields to change as JSON (as `PATCH /v1/jobs/{id}` takes them, e.g. an edited
    /// `job get --json`); `-` reads standard input.
    #[arg(short, long, conflicts_with_all = ["job_fields", "name", "app"])]
    pub file: Option<PathBuf>,
    /// Rename the job.
    #[arg(long)]
    pub name: Option<String>,
    /// Move the job to this app.
    #[arg(long)]
    pub app: Option<String>,
    /// The job's fields to change.
    #[command(flatten)]
    pub fields: JobFlags,
    /// Change the job only if it is still at this version (default: the version just
    /// read, so a change made meanwhile is not overwritten).
    #[arg(long, value_name = "VERSION")]
    pub if_version: Option<i64>,
}

impl AddArgs {
    /// The request body; a file `-` is read from `input`.
    pub fn to_request(&self, input: &mut dyn BufRead) -> anyhow::Result<Value> {
        if let Some(path) = &self.file {
            return read_json(path, input);
        }
        let Some(name) = &self.name else {
            bail!("give --name (or --file)")
        };
        let f = &self.fields;
        let Some(group) = &f.group else {
            bail!("give --group, the consumer group to send tasks to")
        };
        let schedule = match (&f.cron, &f.every, &f.at) {
            (Some(cron), None, None) => cron_schedule(cron, f.timezone.as_deref()),
            (None, Some(every), None) => json!({"every": every}),
            (None, None, Some(at)) => json!({"at": at}),
            _ if f.timezone.is_some() => bail!("--timezone goes with --cron: give --cron too"),
            _ => bail!("give one schedule: --cron, --every or --at"),
        };
        let mut target = json!({"group": group});
        set_target_flags(&mut target, f);
        let mut body = Map::new();
        body.insert("name".into(), json!(name));
        body.insert("schedule".into(), schedule);
        body.insert("target".into(), target);
        if let Some(app) = &self.app {
            body.insert("app".into(), json!(app));
        }
        if f.backoff_initial.is_some() || f.backoff_max.is_some() {
            let mut backoff = Map::new();
            insert_some(&mut backoff, "initial", f.backoff_initial.as_ref());
            insert_some(&mut backoff, "max", f.backoff_max.as_ref());
            body.insert("backoff".into(), Value::Object(backoff));
        }
        insert_scalars(&mut body, f)?;
        if self.paused {
            body.insert("paused".into(), json!(true));
        }
        Ok(Value::Object(body))
    }
}

impl EditArgs {
    /// The `PATCH` body for `current`: the fields the flags name, with schedule, target
    /// and backoff completed from `current` (the API replaces those whole).
    /// A file `-` is read from `input`.
    pub fn to_patch(
        &self,
        current: &JobResponse,
        input: &mut dyn BufRead,
    ) -> anyhow::Result<Value> {
        if let Some(path) = &self.file {
            let body = read_json(path, input)?;
            if !body.is_object() {
                bail!(
                    "{} must hold a JSON object of the fields to change",
                    path.display()
                );
            }
            return Ok(body);
        }
        let f = &self.fields;
        let spec = &current.spec;
        let mut body = Map::new();
        insert_some(&mut body, "name", self.name.as_ref());
        insert_some(&mut body, "app", self.app.as_ref());
        let schedule = match (&f.cron, &f.every, &f.at, &f.timezone) {
            (Some(cron), _, _, timezone) => Some(cron_schedule(
                cron,
                timezone.as_deref().or(spec.schedule.timezone.as_deref()),
            )),
            (_, Some(every), _, _) => Some(json!({"every": every})),
            (_, _, Some(at), _) => Some(json!({"at": at})),
            (None, None, None, Some(timezone)) => match &spec.schedule.cron {
                Some(cron) => Some(cron_schedule(cron, Some(timezone))),
                None => bail!(
                    "--timezone applies to cron schedules, and {} runs {}: give --cron too",
                    spec.name,
                    super::schedule_text::summary(&spec.schedule)
                ),
            },
            (None, None, None, None) => None,
        };
        if let Some(schedule) = schedule {
            body.insert("schedule".into(), schedule);
        }
        if f.group.is_some() || f.mode.is_some() || f.zones.is_some() || f.shards.is_some() {
            body.insert("target".into(), edited_target(current, f));
        }
        if f.backoff_initial.is_some() || f.backoff_max.is_some() {
            let initial = f
                .backoff_initial
                .clone()
                .unwrap_or_else(|| spec.backoff.initial.to_string());
            let max = f
                .backoff_max
                .clone()
                .unwrap_or_else(|| spec.backoff.max.to_string());
            body.insert("backoff".into(), json!({"initial": initial, "max": max}));
        }
        insert_scalars(&mut body, f)?;
        if body.is_empty() {
            bail!("nothing to change: give the fields to change as flags (see --help) or --file");
        }
        Ok(Value::Object(body))
    }
}

/// `{"cron": ..., "timezone": ...}`, the timezone only when given.
fn cron_schedule(cron: &str, timezone: Option<&str>) -> Value {
    let mut schedule = json!({"cron": cron});
    if let Some(timezone) = timezone {
        schedule["timezone"] = json!(timezone);
    }
    schedule
}

/// Sets whichever of mode, zones and shards the flags give on `target` (the server
/// checks that they fit together).
fn set_target_flags(target: &mut Value, f: &JobFlags) {
    if let Some(mode) = &f.mode {
        target["mode"] = json!(mode);
    }
    if let Some(zones) = &f.zones {
        target["zones"] = json!(zones);
    }
    if let Some(shards) = f.shards {
        target["shards"] = json!(shards);
    }
}

/// `current`'s target with the flags applied. A new mode drops the zones or shard count
/// that only the old one had, unless given again.
fn edited_target(current: &JobResponse, f: &JobFlags) -> Value {
    let old = &current.spec.target;
    let mut target = json!({
        "group": f.group.as_deref().unwrap_or(&old.group),
        "mode": old.mode.as_str(),
    });
    let mode = f.mode.as_deref().unwrap_or(old.mode.as_str());
    if mode == "zone"
        && let Some(zones) = &old.zones
    {
        target["zones"] = json!(zones);
    }
    if mode == "sharded"
        && let Some(shards) = old.shards
    {
        target["shards"] = json!(shards);
    }
    set_target_flags(&mut target, f);
    target
}

/// The fields set by value: payload, timeouts, attempts and policies.
fn insert_scalars(body: &mut Map<String, Value>, f: &JobFlags) -> anyhow::Result<()> {
    if let Some(payload) = &f.payload {
        let payload: Value = serde_json::from_str(payload).context("--payload is not JSON")?;
        body.insert("payload".into(), payload);
    }
    insert_some(body, "ack_timeout", f.ack_timeout.as_ref());
    insert_some(body, "run_timeout", f.run_timeout.as_ref());
    insert_some(body, "max_attempts", f.max_attempts.as_ref());
    insert_some(body, "misfire", f.misfire.as_ref());
    insert_some(body, "catch_up_limit", f.catch_up_limit.as_ref());
    insert_some(body, "overlap", f.overlap.as_ref());
    for (key, value) in [
        ("start_at", &f.start_at),
        ("end_at", &f.end_at),
        ("jitter", &f.jitter),
    ] {
        match value.as_deref() {
            None => {}
            Some("none") => {
                body.insert(key.into(), Value::Null);
            }
            Some(text) => {
                body.insert(key.into(), json!(text));
            }
        }
    }
    match f.pause_after_failures {
        // null clears the setting in a PATCH and means "never" in a new job.
        Some(0) => {
            body.insert("pause_after_failures".into(), Value::Null);
        }
        Some(n) => {
            body.insert("pause_after_failures".into(), json!(n));
        }
        None => {}
    }
    Ok(())
}

fn insert_some(body: &mut Map<String, Value>, key: &str, value: Option<&impl serde::Serialize>) {
    if let Some(value) = value {
        body.insert(key.into(), json!(value));
    }
}

/// JSON from `path`, or from `input` (standard input) for `-`.
fn read_json(path: &Path, input: &mut dyn BufRead) -> anyhow::Result<Value> {
    let text = read_source(path, input)?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
}

#[cfg(test)]
mod tests;
