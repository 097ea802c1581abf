//! The API's JSON shapes: what a client sends to create or change a job, and how jobs and
//! runs are returned. Field names and meanings are the public surface in the design brief.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::error::{ApiError, ErrorCode};
use chime_consumer::protocol::{AttemptRecord, Progress};

use crate::domain::{
    Backoff, DeliveryMode, Job, JobSettings, JobSpec, MisfirePolicy, OverlapPolicy, Run, RunState,
    Schedule, Target,
    broadcast::{InstanceReceipt, ReceiptState},
    duration::HumanDuration,
    job::{limits, validate_name, validate_payload_size, validate_payload_text},
    schedule::ScheduleSpec,
};

/// A job as a client writes it (`POST /v1/jobs`, and the fields `PATCH` may replace).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRequest {
    /// Namespace, default `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    /// Unique within the app.
    pub name: String,
    /// One of `{"cron", "timezone"}`, `{"every"}`, `{"at"}`.
    pub schedule: ScheduleSpec,
    /// Consumer group and delivery mode.
    pub target: TargetRequest,
    /// JSON handed to the handler, default null.
    #[serde(default)]
    pub payload: Value,
    /// Default `30s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack_timeout: Option<String>,
    /// Default 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Default `5m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_timeout: Option<String>,
    /// Retry delays, default `{"initial": "1s", "max": "5m"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<BackoffRequest>,
    /// `fire_once` (default), `skip` or `catch_up`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misfire: Option<String>,
    /// Most missed fires `catch_up` replays, default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catch_up_limit: Option<u32>,
    /// `allow` (default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<String>,
    /// Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

/// A retry backoff as a client writes it; a missing field keeps its default.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackoffRequest {
    /// Delay before the first retry, default `1s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial: Option<String>,
    /// Longest delay, default `5m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<String>,
}

/// A target as a client writes it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetRequest {
    /// Consumer group.
    pub group: String,
    /// Delivery mode: `group` (default), `broadcast`, `zone` or `sharded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// `zone` mode: the zones that must each run every fire (omitted: every zone with
    /// live consumers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
    /// `sharded` mode: items per fire, 1 to 1024.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
}

impl JobRequest {
    /// The request that would recreate `spec`.
    pub fn from_spec(spec: &JobSpec) -> Self {
        let s = &spec.settings;
        Self {
            app: Some(spec.app.clone()),
            name: spec.name.clone(),
            schedule: s.schedule.to_spec(),
            target: TargetRequest {
                group: s.target.group.clone(),
                mode: Some(s.target.mode.as_str().to_string()),
                zones: s.target.zones.clone(),
                shards: s.target.shards,
            },
            payload: s.payload.clone(),
            ack_timeout: Some(s.ack_timeout.to_string()),
            max_attempts: Some(s.max_attempts),
            run_timeout: Some(s.run_timeout.to_string()),
            backoff: Some(BackoffRequest {
                initial: Some(s.backoff.initial.to_string()),
                max: Some(s.backoff.max.to_string()),
            }),
            misfire: Some(s.misfire.as_str().to_string()),
            catch_up_limit: Some(s.catch_up_limit),
            overlap: Some(
                match s.overlap {
                    OverlapPolicy::Allow => "allow",
                    OverlapPolicy::Forbid => "forbid",
                }
                .to_string(),
            ),
            paused: Some(spec.paused),
        }
    }

    /// Validates the request into a job definition.
    pub fn into_spec(self, payload_limit: usize) -> Result<JobSpec, ApiError> {
        let app = self.app.unwrap_or_else(|| limits::DEFAULT_APP.to_string());
        validate_name("app", &app)?;
        validate_name("name", &self.name)?;
        let schedule = Schedule::from_spec(&self.schedule)?;
        validate_payload_text(&self.payload)?;
        validate_payload_size(&self.payload, payload_limit)
            .map_err(|e| ApiError::field(ErrorCode::PayloadTooLarge, e.field, e.message))?;
        let ack_timeout =
            duration_field("ack_timeout", self.ack_timeout, limits::DEFAULT_ACK_TIMEOUT)?;
        let run_timeout =
            duration_field("run_timeout", self.run_timeout, limits::DEFAULT_RUN_TIMEOUT)?;
        let defaults = Backoff::default();
        let backoff = match self.backoff {
            None => defaults,
            Some(b) => Backoff {
                initial: duration_field("backoff.initial", b.initial, defaults.initial.get())?,
                max: duration_field("backoff.max", b.max, defaults.max.get())?,
            },
        };
        let settings = JobSettings {
            schedule,
            target: Target {
                group: self.target.group,
                mode: parse_mode(self.target.mode.as_deref())?,
                zones: self.target.zones,
                shards: self.target.shards,
            },
            payload: self.payload,
            ack_timeout,
            max_attempts: self.max_attempts.unwrap_or(limits::DEFAULT_MAX_ATTEMPTS),
            run_timeout,
            backoff,
            misfire: parse_misfire(self.misfire.as_deref())?,
            catch_up_limit: self
                .catch_up_limit
                .unwrap_or(limits::DEFAULT_CATCH_UP_LIMIT),
            overlap: parse_overlap(self.overlap.as_deref())?,
        };
        settings.validate()?;
        let spec = JobSpec {
            app,
            name: self.name,
            paused: self.paused.unwrap_or(false),
            settings,
        };
        spec.validate_topology()?;
        Ok(spec)
    }
}

/// A duration field: parsed if given, else `default`.
fn duration_field(
    field: &'static str,
    text: Option<String>,
    default: std::time::Duration,
) -> Result<HumanDuration, ApiError> {
    match text {
        Some(text) => HumanDuration::parse(&text)
            .map_err(|m| ApiError::field(ErrorCode::InvalidField, field, m)),
        None => Ok(HumanDuration(default)),
    }
}

fn parse_mode(mode: Option<&str>) -> Result<DeliveryMode, ApiError> {
    match mode.map(|m| (m, DeliveryMode::parse(m))) {
        None => Ok(DeliveryMode::Group),
        Some((_, Some(mode))) => Ok(mode),
        Some((other, None)) => Err(ApiError::field(
            ErrorCode::InvalidField,
            "target.mode",
            format!(
                "unknown delivery mode {other:?}: use \"group\", \"broadcast\", \"zone\" or \"sharded\""
            ),
        )),
    }
}

fn parse_misfire(policy: Option<&str>) -> Result<MisfirePolicy, ApiError> {
    match policy {
        None | Some("fire_once") => Ok(MisfirePolicy::FireOnce),
        Some("skip") => Ok(MisfirePolicy::Skip),
        Some("catch_up") => Ok(MisfirePolicy::CatchUp),
        Some(other) => Err(ApiError::field(
            ErrorCode::InvalidField,
            "misfire",
            format!(
                "unknown misfire policy {other:?}: use \"fire_once\", \"skip\" or \"catch_up\""
            ),
        )),
    }
}

fn parse_overlap(policy: Option<&str>) -> Result<OverlapPolicy, ApiError> {
    match policy {
        None | Some("allow") => Ok(OverlapPolicy::Allow),
        Some("forbid") => Ok(OverlapPolicy::Forbid),
        Some(other) => Err(ApiError::field(
            ErrorCode::InvalidField,
            "overlap",
            format!("unknown overlap policy {other:?}: use \"allow\" or \"forbid\""),
        )),
    }
}

/// RFC 3339 with milliseconds, UTC.
pub fn timestamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A job as the API returns it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JobResponse {
    /// Id.
    pub id: Uuid,
    /// The definition, as it would be written.
    #[serde(flatten)]
    pub spec: JobResponseSpec,
    /// Version, for `PATCH`.
    pub version: i64,
    /// Next scheduled fire (null: none).
    pub next_fire_at: Option<String>,
    /// Creation time.
    pub created_at: String,
    /// Last change.
    pub updated_at: String,
}

/// The definition fields of a returned job, every default filled in.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JobResponseSpec {
    /// App.
    pub app: String,
    /// Name.
    pub name: String,
    /// Schedule.
    pub schedule: ScheduleSpec,
    /// Target.
    pub target: Target,
    /// Payload.
    pub payload: Value,
    /// Ack timeout.
    pub ack_timeout: String,
    /// Max attempts.
    pub max_attempts: u32,
    /// Run timeout.
    pub run_timeout: String,
    /// Retry backoff.
    pub backoff: Backoff,
    /// Misfire policy.
    pub misfire: MisfirePolicy,
    /// Catch-up bound.
    pub catch_up_limit: u32,
    /// Overlap policy.
    pub overlap: OverlapPolicy,
    /// Paused.
    pub paused: bool,
}

impl From<&Job> for JobResponse {
    fn from(job: &Job) -> Self {
        let s = &job.spec.settings;
        Self {
            id: job.id,
            spec: JobResponseSpec {
                app: job.spec.app.clone(),
                name: job.spec.name.clone(),
                schedule: s.schedule.to_spec(),
                target: s.target.clone(),
                payload: s.payload.clone(),
                ack_timeout: s.ack_timeout.to_string(),
                max_attempts: s.max_attempts,
                run_timeout: s.run_timeout.to_string(),
                backoff: s.backoff,
                misfire: s.misfire,
                catch_up_limit: s.catch_up_limit,
                overlap: s.overlap,
                paused: job.spec.paused,
            },
            version: job.version,
            next_fire_at: job.next_fire_at.map(timestamp),
            created_at: timestamp(job.created_at),
            updated_at: timestamp(job.updated_at),
        }
    }
}

/// A run as the API returns it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunResponse {
    /// Run id: the task id and idempotency key.
    pub id: Uuid,
    /// The job.
    pub job_id: Uuid,
    /// Scheduled fire time.
    pub fire_time: String,
    /// Shard index.
    pub shard: u32,
    /// Shard items of the fire.
    pub shard_total: u32,
    /// The job's delivery mode when the run was recorded.
    #[serde(default)]
    pub mode: DeliveryMode,
    /// The zone this item is for; null unless `mode` is `zone`.
    #[serde(default)]
    pub zone: Option<String>,
    /// Delivery attempt.
    pub attempt: u32,
    /// State.
    pub state: crate::domain::RunState,
    /// `schedule` or `manual`.
    pub trigger: crate::domain::RunTrigger,
    /// Payload sent.
    pub payload: Value,
    /// When recorded.
    pub created_at: String,
    /// When the broker confirmed the task.
    pub dispatched_at: Option<String>,
    /// When a consumer acked it.
    pub acked_at: Option<String>,
    /// When the handler finished.
    pub finished_at: Option<String>,
    /// Consumer instance.
    pub consumer: Option<String>,
    /// Handler output.
    pub output: Option<Value>,
    /// Failure reason, or why publishing is pending.
    pub error: Option<String>,
    /// The scheduler node that recorded the run.
    pub fired_by: Option<String>,
    /// For a `dispatched` or `acked` run: when it is published again (as attempt + 1)
    /// unless an ack, heartbeat or result comes first.
    pub deadline_at: Option<String>,
    /// For a `failed` run: when the next attempt is published.
    pub next_attempt_at: Option<String>,
    /// For a `dispatched` run: what it waits for while its ack deadline moves on without
    /// using an attempt (`consumer`: its work queue has no consumer); null otherwise.
    #[serde(default)]
    pub waiting_for: Option<crate::domain::WaitingFor>,
    /// Attempts that did not succeed, oldest first.
    pub history: Vec<AttemptRecord>,
    /// The handler's latest progress report.
    pub progress: Option<Progress>,
    /// The consumer's latest heartbeat.
    pub heartbeat_at: Option<String>,
    /// `broadcast` runs: one receipt per consumer instance that acked, with its latest
    /// attempt; always empty for other modes.
    #[serde(default)]
    pub instances: Vec<InstanceResponse>,
    /// Every item of the run's fire (same job, fire time and trigger), this run
    /// included, by shard. Only on the single-run answers (`GET /v1/runs/{id}` and a
    /// manual trigger), not in run lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<Vec<ItemResponse>>,
    /// The fire as a whole (see [`FireState::of`]); present with `items`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fire_state: Option<FireState>,
}

/// What one consumer instance did with a broadcast run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InstanceResponse {
    /// Consumer instance id.
    pub instance: String,
    /// The attempt it ran (its latest).
    pub attempt: u32,
    /// `running`, `succeeded`, `failed` or `lost`.
    pub state: ReceiptState,
    /// When it acked.
    pub acked_at: String,
    /// Its last heartbeat.
    pub heartbeat_at: Option<String>,
    /// When it finished, or was declared lost.
    pub finished_at: Option<String>,
    /// The handler's output.
    pub output: Option<Value>,
    /// Why it failed or was lost.
    pub error: Option<String>,
}

impl From<&InstanceReceipt> for InstanceResponse {
    fn from(receipt: &InstanceReceipt) -> Self {
        Self {
            instance: receipt.instance.clone(),
            attempt: receipt.attempt,
            state: receipt.state,
            acked_at: timestamp(receipt.acked_at),
            heartbeat_at: receipt.heartbeat_at.map(timestamp),
            finished_at: receipt.finished_at.map(timestamp),
            output: receipt.output.clone(),
            error: receipt.error.as_ref().map(|e| e.message.clone()),
        }
    }
}

/// One item of a fire, as listed in a run's `items`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ItemResponse {
    /// The item's run id.
    pub id: Uuid,
    /// Shard index.
    pub shard: u32,
    /// The zone (`zone` mode), else null.
    pub zone: Option<String>,
    /// The item's state.
    pub state: RunState,
    /// Its delivery attempt.
    pub attempt: u32,
    /// The consumer instance that acked or finished it last.
    pub consumer: Option<String>,
}

impl From<&Run> for ItemResponse {
    fn from(run: &Run) -> Self {
        Self {
            id: run.id,
            shard: run.shard,
            zone: run.zone.clone(),
            state: run.state,
            attempt: run.attempt,
            consumer: run.consumer.clone(),
        }
    }
}

/// Where a fire stands as a whole, from the states of its items.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FireState {
    /// Some item is neither `succeeded` nor `dead` yet, and none is `dead`.
    Running,
    /// Every item succeeded.
    Succeeded,
    /// Some item is `dead`: the fire will not complete without a replay.
    Dead,
}

impl FireState {
    /// `dead` if any item is dead, else `succeeded` if every item succeeded (and there
    /// is at least one), else `running`.
    pub fn of(states: impl IntoIterator<Item = RunState>) -> Self {
        let mut any = false;
        let mut all_succeeded = true;
        for state in states {
            any = true;
            match state {
                RunState::Dead => return FireState::Dead,
                RunState::Succeeded => {}
                _ => all_succeeded = false,
            }
        }
        if any && all_succeeded {
            FireState::Succeeded
        } else {
            FireState::Running
        }
    }

    /// The state's name in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            FireState::Running => "running",
            FireState::Succeeded => "succeeded",
            FireState::Dead => "dead",
        }
    }
}

impl RunResponse {
    /// This run with the view of its whole fire: `items` (the runs of the fire, this one
    /// included) and their `fire_state`.
    pub fn with_fire(mut self, items: &[Run]) -> Self {
        self.fire_state = Some(FireState::of(items.iter().map(|r| r.state)));
        self.items = Some(items.iter().map(ItemResponse::from).collect());
        self
    }
}

impl From<&Run> for RunResponse {
    fn from(run: &Run) -> Self {
        Self {
            id: run.id,
            job_id: run.job_id,
            fire_time: timestamp(run.fire_time),
            shard: run.shard,
            shard_total: run.shard_total,
            mode: run.mode,
            zone: run.zone.clone(),
            attempt: run.attempt,
            state: run.state,
            trigger: run.trigger,
            payload: run.payload.clone(),
            created_at: timestamp(run.created_at),
            dispatched_at: run.dispatched_at.map(timestamp),
            acked_at: run.acked_at.map(timestamp),
            finished_at: run.finished_at.map(timestamp),
            fired_by: run.fired_by.clone(),
            consumer: run.consumer.clone(),
            output: run.output.clone(),
            error: run.error.clone(),
            deadline_at: run
                .due_at
                .filter(|_| matches!(run.state, RunState::Dispatched | RunState::Acked))
                .map(timestamp),
            next_attempt_at: run
                .due_at
                .filter(|_| run.state == RunState::Failed)
                .map(timestamp),
            waiting_for: run.waiting_for,
            history: run.history.clone(),
            progress: run.progress.clone(),
            heartbeat_at: run.heartbeat_at.map(timestamp),
            instances: run.instances.iter().map(InstanceResponse::from).collect(),
            items: None,
            fire_state: None,
        }
    }
}

/// A page of a list.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ListResponse<T> {
    /// This page.
    pub items: Vec<T>,
    /// Cursor of the next page; null on the last.
    pub next: Option<String>,
}

/// Query parameters of list endpoints.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Page size.
    pub limit: Option<u32>,
    /// The previous page's `next`.
    pub cursor: Option<String>,
    /// Only jobs of this app (job list only).
    pub app: Option<String>,
}

impl ListQuery {
    /// The page size: default 100, at most 1000.
    pub fn limit(&self) -> Result<u32, ApiError> {
        match self.limit {
            None => Ok(100),
            Some(n @ 1..=1000) => Ok(n),
            Some(n) => Err(ApiError::field(
                ErrorCode::InvalidField,
                "limit",
                format!("limit {n} is out of range: use 1 to 1000"),
            )),
        }
    }
}

/// The cursor after a run: `<fire time ms>_<run id>`.
pub fn run_cursor(run: &Run) -> String {
    format!("{}_{}", run.fire_time.timestamp_millis(), run.id)
}

/// Parses a run cursor.
pub fn parse_run_cursor(cursor: &str) -> Result<(DateTime<Utc>, Uuid), ApiError> {
    let bad = || {
        ApiError::field(
            ErrorCode::InvalidField,
            "cursor",
            format!("invalid cursor {cursor:?}"),
        )
    };
    let (ms, id) = cursor.split_once('_').ok_or_else(bad)?;
    let at = ms
        .parse()
        .ok()
        .and_then(DateTime::from_timestamp_millis)
        .ok_or_else(bad)?;
    Ok((at, Uuid::parse_str(id).map_err(|_| bad())?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(json: Value) -> Result<JobSpec, ApiError> {
        serde_json::from_value::<JobRequest>(json)
            .unwrap()
            .into_spec(1024)
    }

    #[test]
    fn brief_example_is_accepted_with_defaults() {
        let spec = request(json!({
            "app": "shop", "name": "close-expired-orders",
            "schedule": {"cron": "0 */2 * * * *", "timezone": "Asia/Shanghai"},
            "target": {"group": "orders", "mode": "group"},
            "payload": {"older_than_min": 30},
            "ack_timeout": "30s", "max_attempts": 5, "misfire": "fire_once", "overlap": "allow", "paused": false
        }))
        .unwrap();
        assert_eq!(spec.app, "shop");
        let minimal =
            request(json!({"name": "n", "schedule": {"every": "1m"}, "target": {"group": "g"}}))
                .unwrap();
        assert_eq!(minimal.app, "default");
        assert_eq!(minimal.settings.max_attempts, 5);
        assert_eq!(
            JobRequest::from_spec(&minimal).into_spec(1024).unwrap(),
            minimal
        );
    }

    #[test]
    fn bad_values_name_their_field() {
        let base = || json!({"name": "n", "schedule": {"every": "1m"}, "target": {"group": "g"}});
        let with = |k: &str, v: Value| {
            let mut j = base();
            j[k] = v;
            request(j).unwrap_err()
        };
        assert_eq!(
            with("misfire", json!("later")).field.as_deref(),
            Some("misfire")
        );
        assert_eq!(
            with("ack_timeout", json!("forever")).field.as_deref(),
            Some("ack_timeout")
        );
        assert_eq!(
            with("name", json!("has space")).field.as_deref(),
            Some("name")
        );
        let big = with("payload", json!("x".repeat(2000)));
        assert_eq!(
            (big.code, big.field.as_deref()),
            (ErrorCode::PayloadTooLarge, Some("payload"))
        );
        let mode = with("target", json!({"group": "g", "mode": "everyone"}));
        assert_eq!(
            (mode.code, mode.field.as_deref()),
            (ErrorCode::InvalidField, Some("target.mode"))
        );
    }

    /// The request with `target` as given, parsed the way the API parses a body.
    fn with_target(target: Value) -> Result<JobSpec, ApiError> {
        let body = json!({"name": "n", "schedule": {"every": "1m"}, "target": target});
        let request: JobRequest = crate::api::body::parse_json(body.to_string().as_bytes())?;
        request.into_spec(1024)
    }

    #[test]
    fn every_delivery_mode_is_accepted() {
        for target in [
            json!({"group": "g"}),
            json!({"group": "g", "mode": "group"}),
            json!({"group": "g", "mode": "broadcast"}),
            json!({"group": "g", "mode": "zone"}),
            json!({"group": "g", "mode": "zone", "zones": ["dc1", "dc2"]}),
            json!({"group": "g", "mode": "sharded", "shards": 1}),
            json!({"group": "g", "mode": "sharded", "shards": limits::MAX_SHARDS}),
        ] {
            let spec = with_target(target.clone()).unwrap_or_else(|e| panic!("{target}: {e:?}"));
            let mode = target["mode"].as_str().unwrap_or("group");
            assert_eq!(spec.settings.target.mode.as_str(), mode, "{target}");
        }
        let zones: Vec<String> = (0..limits::MAX_ZONES).map(|i| format!("z{i}")).collect();
        assert!(with_target(json!({"group": "g", "mode": "zone", "zones": zones})).is_ok());
    }

    #[test]
    fn bad_targets_name_their_field() {
        let too_many: Vec<String> = (0..=limits::MAX_ZONES).map(|i| format!("z{i}")).collect();
        let cases = [
            (
                json!({"group": "g", "mode": "carrier-pigeon"}),
                "target.mode",
            ),
            (json!({"group": "g", "mode": 7}), "target.mode"),
            (
                json!({"group": "g", "mode": "sharded", "shards": 0}),
                "target.shards",
            ),
            (
                json!({"group": "g", "mode": "sharded", "shards": 1025}),
                "target.shards",
            ),
            (
                json!({"group": "g", "mode": "sharded", "shards": -1}),
                "target.shards",
            ),
            (json!({"group": "g", "mode": "sharded"}), "target.shards"),
            (json!({"group": "g", "shards": 4}), "target.shards"),
            (
                json!({"group": "g", "mode": "broadcast", "shards": 4}),
                "target.shards",
            ),
            (
                json!({"group": "g", "mode": "zone", "zones": []}),
                "target.zones",
            ),
            (
                json!({"group": "g", "mode": "zone", "zones": too_many}),
                "target.zones",
            ),
            (
                json!({"group": "g", "mode": "zone", "zones": ["dc1", "dc1"]}),
                "target.zones",
            ),
            (
                json!({"group": "g", "mode": "zone", "zones": ["no space"]}),
                "target.zones[0]",
            ),
            (
                json!({"group": "x".repeat(128), "mode": "zone", "zones": ["dc1", "z".repeat(128)]}),
                "target.zones[1]",
            ),
            (
                json!({"group": "g", "mode": "zone", "zones": "dc1"}),
                "target.zones",
            ),
            (
                json!({"group": "g", "mode": "broadcast", "zones": ["dc1"]}),
                "target.zones",
            ),
            (json!({"group": "g", "zones": ["dc1"]}), "target.zones"),
            (
                json!({"group": "g", "mode": "zone", "zone": "dc1"}),
                "target.zone",
            ),
            (
                json!({"group": "g", "mode": "sharded", "shard": 2}),
                "target.shard",
            ),
        ];
        for (target, field) in cases {
            let error = with_target(target.clone()).expect_err(&target.to_string());
            assert_eq!(
                (error.code, error.field.as_deref()),
                (ErrorCode::InvalidField, Some(field)),
                "{target}: {}",
                error.message
            );
            assert!(!error.message.is_empty());
        }
        let unknown =
            with_target(json!({"group": "g", "mode": "zone", "zone": "dc1"})).unwrap_err();
        assert!(
            unknown.message.contains("unknown field `zone`"),
            "{}",
            unknown.message
        );
    }

    #[test]
    fn names_joined_into_a_broker_name_share_its_255_bytes() {
        let long = "x".repeat(128);
        let job = |app: &str, name: &str| {
            request(
                json!({"app": app, "name": name, "schedule": {"every": "1m"},
                "target": {"group": "g"}}),
            )
        };
        // `<app>.<name>` is the routing key of observer copies: 257 bytes here.
        let error = job(&long, &long).unwrap_err();
        assert_eq!(
            (error.code, error.field.as_deref()),
            (ErrorCode::InvalidField, Some("name"))
        );
        assert!(error.message.contains("257 bytes"), "{}", error.message);
        assert!(
            job(&long, &"y".repeat(126)).is_ok(),
            "254 bytes of names fit"
        );
        let zone = |group: &str, zone: &str| {
            with_target(json!({"group": group, "mode": "zone", "zones": [zone]}))
        };
        let error = zone(&long, &long).unwrap_err();
        assert_eq!(error.field.as_deref(), Some("target.zones[0]"));
        assert!(error.message.contains("274 bytes"), "{}", error.message);
        assert!(
            zone(&long, &"z".repeat(109)).is_ok(),
            "237 bytes of names fit"
        );
        assert!(zone(&long, &"z".repeat(110)).is_err());
    }

    #[test]
    fn targets_survive_the_patch_round_trip() {
        for target in [
            json!({"group": "g", "mode": "broadcast"}),
            json!({"group": "g", "mode": "zone"}),
            json!({"group": "g", "mode": "zone", "zones": ["dc2", "dc1"]}),
            json!({"group": "g", "mode": "sharded", "shards": 8}),
        ] {
            let spec = with_target(target.clone()).unwrap();
            assert_eq!(
                JobRequest::from_spec(&spec).into_spec(1024).unwrap(),
                spec,
                "{target}"
            );
            // What PATCH does: the current job as a request, the changes laid over it.
            let Value::Object(mut merged) =
                serde_json::to_value(JobRequest::from_spec(&spec)).unwrap()
            else {
                panic!("a request is an object")
            };
            merged.insert("payload".into(), json!({"v": 2}));
            let patched = serde_json::from_value::<JobRequest>(Value::Object(merged))
                .unwrap()
                .into_spec(1024)
                .unwrap();
            assert_eq!(patched.settings.target, spec.settings.target, "{target}");
            assert_eq!(patched.settings.payload, json!({"v": 2}));
        }
    }

    fn run_in(state: RunState, shard: u32) -> Run {
        let mut run = Run::new(
            Uuid::nil(),
            "2026-11-21T10:00:00Z".parse().unwrap(),
            crate::domain::RunTrigger::Schedule,
            Value::Null,
            "2026-11-21T10:00:00Z".parse().unwrap(),
        )
        .item(DeliveryMode::Sharded, shard, 3, None);
        run.state = state;
        run
    }

    #[test]
    fn fire_state_is_dead_if_any_item_is_else_succeeded_only_when_all_are() {
        use RunState::*;
        let of = |states: &[RunState]| FireState::of(states.iter().copied());
        assert_eq!(of(&[Succeeded]), FireState::Succeeded);
        assert_eq!(of(&[Succeeded, Succeeded, Succeeded]), FireState::Succeeded);
        assert_eq!(of(&[Succeeded, Acked, Succeeded]), FireState::Running);
        assert_eq!(of(&[Scheduled, Dispatched, Failed]), FireState::Running);
        assert_eq!(of(&[Succeeded, Dead, Acked]), FireState::Dead);
        assert_eq!(of(&[Dead]), FireState::Dead);
        assert_eq!(of(&[]), FireState::Running);
        assert_eq!(
            serde_json::to_value(FireState::Dead).unwrap(),
            json!("dead")
        );
        assert_eq!(FireState::Running.as_str(), "running");
    }

    #[test]
    fn a_run_shows_its_mode_zone_instances_and_fire() {
        let items = [
            run_in(RunState::Succeeded, 0),
            run_in(RunState::Acked, 1),
            run_in(RunState::Scheduled, 2),
        ];
        let listed = serde_json::to_value(RunResponse::from(&items[1])).unwrap();
        assert_eq!(
            (&listed["mode"], &listed["zone"], &listed["instances"]),
            (&json!("sharded"), &Value::Null, &json!([]))
        );
        assert!(listed.get("items").is_none() && listed.get("fire_state").is_none());
        let single = RunResponse::from(&items[1]).with_fire(&items);
        let json = serde_json::to_value(&single).unwrap();
        assert_eq!(json["fire_state"], "running");
        assert_eq!(
            json["items"][1],
            json!({"id": items[1].id, "shard": 1, "zone": null, "state": "acked",
                   "attempt": 1, "consumer": null})
        );
        assert_eq!(serde_json::from_value::<RunResponse>(json).unwrap(), single);

        let mut zone =
            run_in(RunState::Succeeded, 0).item(DeliveryMode::Zone, 1, 2, Some("dc2".into()));
        zone.consumer = Some("web-1".into());
        let json =
            serde_json::to_value(RunResponse::from(&zone).with_fire(std::slice::from_ref(&zone)))
                .unwrap();
        assert_eq!(
            (&json["mode"], &json["zone"]),
            (&json!("zone"), &json!("dc2"))
        );
        assert_eq!(json["fire_state"], "succeeded");

        let at: DateTime<Utc> = "2026-11-21T10:00:01Z".parse().unwrap();
        let mut broadcast = run_in(RunState::Acked, 0).item(DeliveryMode::Broadcast, 0, 1, None);
        broadcast.instances = vec![InstanceReceipt {
            instance: "web-1".into(),
            attempt: 1,
            state: ReceiptState::Lost,
            acked_at: at,
            heartbeat_at: None,
            finished_at: Some(at),
            output: None,
            error: Some(chime_consumer::protocol::TaskError {
                message: "silent".into(),
                retryable: true,
                retry_after_ms: None,
            }),
        }];
        let json = serde_json::to_value(RunResponse::from(&broadcast)).unwrap();
        assert_eq!(
            json["instances"],
            json!([{"instance": "web-1", "attempt": 1, "state": "lost",
                    "acked_at": "2026-11-21T10:00:01.000Z", "heartbeat_at": null,
                    "finished_at": "2026-11-21T10:00:01.000Z", "output": null,
                    "error": "silent"}])
        );
    }

    #[test]
    fn run_cursor_round_trips() {
        let run = Run::new(
            Uuid::now_v7(),
            Utc::now(),
            crate::domain::RunTrigger::Manual,
            Value::Null,
            Utc::now(),
        );
        assert_eq!(
            parse_run_cursor(&run_cursor(&run)).unwrap(),
            (run.fire_time, run.id)
        );
        assert!(parse_run_cursor("nope").is_err());
    }
}
