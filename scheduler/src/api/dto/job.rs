//! The job shapes of the HTTP API: what a client sends to create or change a job
//! ([`JobRequest`]) and how a job is returned ([`JobResponse`]). Field names and meanings
//! are the public surface in the design brief.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::RequestError;
use crate::domain::{
    Backoff, DeliveryMode, Job, JobSettings, JobSpec, MisfirePolicy, OverlapPolicy, Schedule,
    Target,
    duration::HumanDuration,
    job::{limits, validate_name, validate_payload_size, validate_payload_text},
    schedule::ScheduleSpec,
    timestamp::timestamp,
    validation::one_of,
    window::Window,
};

/// A job as a client writes it (`POST /v1/jobs`, and the fields `PATCH` may replace).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "app": "shop", "name": "close-expired-orders",
    "schedule": {"cron": "0 */2 * * * *", "timezone": "Asia/Shanghai"},
    "target": {"group": "orders", "mode": "group"},
    "payload": {"older_than_min": 30}, "ack_timeout": "30s", "max_attempts": 5
}))]
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
    #[schema(value_type = Option<MisfirePolicy>)]
    pub misfire: Option<String>,
    /// Most missed fires `catch_up` replays, default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catch_up_limit: Option<u32>,
    /// `allow` (default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<OverlapPolicy>)]
    pub overlap: Option<String>,
    /// Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,

    // -- Fire window and jitter (issue 38).
    /// RFC 3339: no scheduled fire before it (inclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    /// RFC 3339, after `start_at`: no scheduled fire after it (inclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<String>,
    /// Most delay added to each scheduled fire's publish, `0s` to `1h`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<String>,
    // -- Pause on failure. --
    /// Pause after this many consecutive dead runs, 1 to 1000; absent: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_after_failures: Option<u32>,
}

/// A retry backoff as a client writes it; a missing field keeps its default.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TargetRequest {
    /// Consumer group.
    pub group: String,
    /// Delivery mode: `group` (default), `broadcast`, `zone` or `sharded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<crate::domain::wire_schema::DeliveryModeSchema>)]
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
        let (start_at, end_at, jitter) = s.window.to_text();
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
            overlap: Some(s.overlap.as_str().to_string()),
            paused: Some(spec.paused),
            start_at,
            end_at,
            jitter,
            pause_after_failures: s.pause_after_failures,
        }
    }

    /// Validates the request into a job definition.
    pub fn into_spec(self, payload_limit: usize) -> Result<JobSpec, RequestError> {
        let app = self.app.unwrap_or_else(|| limits::DEFAULT_APP.to_string());
        validate_name("app", &app)?;
        validate_name("name", &self.name)?;
        let schedule = Schedule::from_spec(&self.schedule)?;
        validate_payload_text(&self.payload)?;
        validate_payload_size(&self.payload, payload_limit)
            .map_err(RequestError::PayloadTooLarge)?;
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
            window: Window::parse(
                self.start_at.as_deref(),
                self.end_at.as_deref(),
                self.jitter.as_deref(),
            )?,
            pause_after_failures: self.pause_after_failures,
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
) -> Result<HumanDuration, RequestError> {
    match text {
        Some(text) => HumanDuration::parse(&text).map_err(|m| RequestError::invalid(field, m)),
        None => Ok(HumanDuration(default)),
    }
}

fn parse_mode(mode: Option<&str>) -> Result<DeliveryMode, RequestError> {
    const MODES: [DeliveryMode; 4] = [
        DeliveryMode::Group,
        DeliveryMode::Broadcast,
        DeliveryMode::Zone,
        DeliveryMode::Sharded,
    ];
    parse_name(
        mode,
        "target.mode",
        "delivery mode",
        DeliveryMode::parse,
        || MODES.map(DeliveryMode::as_str),
    )
}

fn parse_misfire(policy: Option<&str>) -> Result<MisfirePolicy, RequestError> {
    parse_name(
        policy,
        "misfire",
        "misfire policy",
        MisfirePolicy::parse,
        || MisfirePolicy::ALL.map(MisfirePolicy::as_str),
    )
}

fn parse_overlap(policy: Option<&str>) -> Result<OverlapPolicy, RequestError> {
    parse_name(
        policy,
        "overlap",
        "overlap policy",
        OverlapPolicy::parse,
        || OverlapPolicy::ALL.map(OverlapPolicy::as_str),
    )
}

/// A named choice: the default when absent, else the value `parse` finds, else an
/// `invalid_field` error listing the names.
fn parse_name<T: Default, const N: usize>(
    name: Option<&str>,
    field: &'static str,
    what: &str,
    parse: impl Fn(&str) -> Option<T>,
    names: impl Fn() -> [&'static str; N],
) -> Result<T, RequestError> {
    match name {
        None => Ok(T::default()),
        Some(name) => parse(name).ok_or_else(|| {
            RequestError::invalid(
                field,
                format!("unknown {what} {name:?}: use {}", one_of(&names())),
            )
        }),
    }
}

/// A job as the API returns it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
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
    /// The schedule fires no more: no next fire (past its `end_at`, or a one-shot or
    /// cron expression that is exhausted).
    #[serde(default)]
    pub finished: bool,
    /// Creation time.
    pub created_at: String,
    /// Last change.
    pub updated_at: String,
}

/// The definition fields of a returned job, every default filled in.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
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
    /// No scheduled fire before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    /// No scheduled fire after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<String>,
    /// Most delay added to each scheduled fire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<String>,
    /// Pause after this many consecutive dead runs; absent: never.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause_after_failures: Option<u32>,
    /// Why the scheduler paused the job itself; absent unless it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused_reason: Option<String>,
}

impl From<&Job> for JobResponse {
    fn from(job: &Job) -> Self {
        let s = &job.spec.settings;
        let (start_at, end_at, jitter) = s.window.to_text();
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
                start_at,
                end_at,
                jitter,
                pause_after_failures: s.pause_after_failures,
                paused_reason: job.paused_reason.clone(),
            },
            version: job.version,
            next_fire_at: job.next_fire_at.map(timestamp),
            finished: job.next_fire_at.is_none(),
            created_at: timestamp(job.created_at),
            updated_at: timestamp(job.updated_at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::error::{ApiError, ErrorCode};
    use serde_json::json;

    #[test]
    fn policy_names_are_their_serde_names_and_parse_back() {
        for p in MisfirePolicy::ALL {
            assert_eq!(serde_json::to_value(p).unwrap(), json!(p.as_str()));
            assert_eq!(MisfirePolicy::parse(p.as_str()), Some(p));
        }
        for p in OverlapPolicy::ALL {
            assert_eq!(serde_json::to_value(p).unwrap(), json!(p.as_str()));
            assert_eq!(OverlapPolicy::parse(p.as_str()), Some(p));
        }
    }

    fn request(json: Value) -> Result<JobSpec, ApiError> {
        // Through the API's mapping, so the codes asserted are the ones clients see.
        Ok(serde_json::from_value::<JobRequest>(json)
            .unwrap()
            .into_spec(1024)?)
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
        Ok(request.into_spec(1024)?)
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
}
