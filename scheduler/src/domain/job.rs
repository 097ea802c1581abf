//! Jobs: a named schedule in an app namespace with a target, a payload and delivery
//! settings. [`JobSpec`] is what a user asks for, validated; [`Job`] is a stored job.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

pub use chime_consumer::protocol::DeliveryMode;
use chime_consumer::protocol::{
    PROTOCOL_VERSION, TaskMessage,
    topology::{self, NameError, NameField, is_valid_name},
};

use super::{
    duration::HumanDuration,
    misfire::{MisfirePolicy, plan_fires_within},
    retry::Backoff,
    run::{Run, RunTrigger},
    schedule::Schedule,
    validation::FieldError,
    window::{DueTask, Window},
};
pub use super::{limits, overlap::OverlapPolicy};

/// Where a job's tasks go.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Target {
    /// Consumer group (for `broadcast`: the group whose instances all run each fire).
    pub group: String,
    /// Delivery mode.
    #[serde(default)]
    #[schema(value_type = super::wire_schema::DeliveryModeSchema)]
    pub mode: DeliveryMode,
    /// `zone` mode: the zones that must each run every fire, in order; `None`: every zone
    /// that has live consumers of the group when the fire is recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
    /// `sharded` mode: how many items each fire is split into.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
}

impl Target {
    /// One instance of `group` runs each fire.
    pub fn group(group: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            mode: DeliveryMode::Group,
            zones: None,
            shards: None,
        }
    }

    /// Checks the mode's own fields: `shards` only and always with `sharded` (1 to
    /// [`limits::MAX_SHARDS`]), `zones` only with `zone` (1 to [`limits::MAX_ZONES`]
    /// distinct names when given).
    pub fn validate(&self) -> Result<(), FieldError> {
        validate_name("target.group", &self.group)?;
        match (self.mode, self.shards) {
            (DeliveryMode::Sharded, None) => {
                return Err(FieldError::new(
                    "target.shards",
                    format!(
                        "sharded mode needs \"shards\": the number of items per fire, 1 to {}",
                        limits::MAX_SHARDS
                    ),
                ));
            }
            (DeliveryMode::Sharded, Some(n)) if !(1..=limits::MAX_SHARDS).contains(&n) => {
                return Err(FieldError::new(
                    "target.shards",
                    format!(
                        "shards {n} is out of range: use 1 to {}",
                        limits::MAX_SHARDS
                    ),
                ));
            }
            (mode, Some(_)) if mode != DeliveryMode::Sharded => {
                return Err(FieldError::new(
                    "target.shards",
                    format!(
                        "\"shards\" only applies to mode \"sharded\", not {:?}",
                        mode.as_str()
                    ),
                ));
            }
            _ => {}
        }
        if let Some(zones) = &self.zones {
            if self.mode != DeliveryMode::Zone {
                return Err(FieldError::new(
                    "target.zones",
                    format!(
                        "\"zones\" only applies to mode \"zone\", not {:?}",
                        self.mode.as_str()
                    ),
                ));
            }
            if zones.is_empty() || zones.len() > limits::MAX_ZONES {
                return Err(FieldError::new(
                    "target.zones",
                    format!(
                        "zones must list 1 to {} zones; omit it for every zone with live consumers",
                        limits::MAX_ZONES
                    ),
                ));
            }
            for (i, zone) in zones.iter().enumerate() {
                validate_name(&format!("target.zones[{i}]"), zone)?;
                if zones[..i].contains(zone) {
                    return Err(FieldError::new(
                        "target.zones",
                        format!("zone {zone:?} is listed twice"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The items each fire is split into, as (shard index, item count, zone). `live`
    /// gives the zones with live consumers, for a `zone` job without its own list; a
    /// zone job with no zone to run has no items.
    pub fn items(&self, live: &LiveZones) -> Vec<(u32, u32, Option<String>)> {
        match self.mode {
            DeliveryMode::Group | DeliveryMode::Broadcast => vec![(0, 1, None)],
            DeliveryMode::Sharded => {
                let total = self.shards.unwrap_or(1).max(1);
                (0..total).map(|shard| (shard, total, None)).collect()
            }
            DeliveryMode::Zone => {
                let zones = self
                    .zones
                    .as_deref()
                    .unwrap_or_else(|| live.of(&self.group));
                let total = zones.len() as u32;
                zones
                    .iter()
                    .enumerate()
                    .map(|(i, zone)| (i as u32, total, Some(zone.clone())))
                    .collect()
            }
        }
    }
}

/// The zones that have live consumers, by group (from consumers' presence messages).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveZones(std::collections::BTreeMap<String, Vec<String>>);

impl LiveZones {
    /// From (group, zone) pairs, in any order and with repeats.
    pub fn new(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        let mut by_group = std::collections::BTreeMap::<String, Vec<String>>::new();
        for (group, zone) in pairs {
            by_group.entry(group).or_default().push(zone);
        }
        for zones in by_group.values_mut() {
            zones.sort();
            zones.dedup();
        }
        Self(by_group)
    }

    /// The live zones of `group`, sorted.
    pub fn of(&self, group: &str) -> &[String] {
        self.0.get(group).map_or(&[], Vec::as_slice)
    }
}

#[cfg(test)]
impl JobSettings {
    /// An every-second job for group `web` in `mode`, for unit tests.
    pub(crate) fn every_second(mode: super::DeliveryMode, max_attempts: u32) -> Self {
        use std::time::Duration;
        JobSettings {
            schedule: Schedule::from_spec(&super::schedule::ScheduleSpec {
                every: Some("1s".into()),
                ..Default::default()
            })
            .expect("a valid schedule"),
            target: Target {
                mode,
                ..Target::group("web")
            },
            payload: Value::Null,
            ack_timeout: HumanDuration(Duration::from_secs(2)),
            max_attempts,
            run_timeout: HumanDuration(Duration::from_secs(10)),
            backoff: Default::default(),
            misfire: MisfirePolicy::FireOnce,
            catch_up_limit: 10,
            overlap: super::OverlapPolicy::Allow,
            window: Window::default(),
            pause_after_failures: None,
        }
    }
}

/// A job's schedule and delivery settings — everything but its identity and pause state.
/// Stored as one JSON document; the field names are the API's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSettings {
    /// When it fires.
    pub schedule: Schedule,
    /// Where its tasks go.
    pub target: Target,
    /// JSON handed to the handler.
    pub payload: Value,
    /// How long a dispatched task may wait for a consumer's ack.
    pub ack_timeout: HumanDuration,
    /// Most deliveries of one fire before it is given up.
    pub max_attempts: u32,
    /// How long an acked run may go without a result or a heartbeat before it is
    /// published again.
    #[serde(default = "default_run_timeout")]
    pub run_timeout: HumanDuration,
    /// Delays between retries of failed attempts.
    #[serde(default)]
    pub backoff: Backoff,
    /// What to do with missed fires.
    pub misfire: MisfirePolicy,
    /// Most missed fires replayed by `catch_up`.
    pub catch_up_limit: u32,
    /// Whether fires may overlap.
    pub overlap: OverlapPolicy,

    // -- Fire window and jitter (issue 38): `start_at`, `end_at`, `jitter` at the top
    // level of the document.
    /// When the schedule may fire, and the jitter of each fire.
    #[serde(flatten)]
    pub window: Window,
    // -- Pause on failure (issue 38). --
    /// Pause the job after this many consecutive runs ended `dead` (see
    /// [`super::failure_pause`]); `None`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_after_failures: Option<u32>,
}

fn default_run_timeout() -> HumanDuration {
    HumanDuration(limits::DEFAULT_RUN_TIMEOUT)
}

/// A validated job definition.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// Namespace, default `default`.
    pub app: String,
    /// Unique within `app`.
    pub name: String,
    /// Paused jobs do not fire.
    pub paused: bool,
    /// Schedule and delivery settings.
    pub settings: JobSettings,
}

/// A stored job.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Id (UUIDv7: ordered by creation).
    pub id: Uuid,
    /// The definition.
    pub spec: JobSpec,
    /// Increases with every change of the definition or pause state; a PATCH names the
    /// version it read and fails if the job changed since.
    pub version: i64,
    /// Next scheduled fire; None for a finished one-shot or an exhausted cron.
    pub next_fire_at: Option<DateTime<Utc>>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change of the definition or pause state.
    pub updated_at: DateTime<Utc>,
    /// Why the scheduler paused the job itself (see [`super::failure_pause`]); `None`
    /// for a running job or one paused by a user. Cleared when the job is resumed.
    pub paused_reason: Option<String>,
}

/// The outcome of [`Job::fires_due`].
#[derive(Debug, Clone, PartialEq)]
pub struct JobFires {
    /// Runs to record.
    pub runs: Vec<Run>,
    /// The job's next fire time after them.
    pub next_fire_at: Option<DateTime<Utc>>,
    /// Whether fires were missed (more than the grace late).
    pub misfired: bool,
    /// How many fire times were due (each is one run per item; a zone job with no zone
    /// to run has fire times but no runs).
    pub fire_times: usize,
}

/// Whether replacing `old` with `new` recomputes the next fire time: the schedule or its
/// window (`start_at`, `end_at`) changed, or the job was resumed. Otherwise the stored
/// next fire time stands, whatever a concurrent fire made of it.
pub fn reschedules(old: &JobSpec, new: &JobSpec) -> bool {
    new.settings.schedule != old.settings.schedule
        || window_moved(&old.settings.window, &new.settings.window)
        || (old.paused && !new.paused)
}

/// Whether the window's bounds differ (a jitter change alone reschedules nothing).
fn window_moved(old: &Window, new: &Window) -> bool {
    (old.start_at, old.end_at) != (new.start_at, new.end_at)
}

/// Checks an app, job or group name against the protocol's naming rule.
pub fn validate_name(field: &str, name: &str) -> Result<(), FieldError> {
    if is_valid_name(name) {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            format!(
                "invalid name {name:?}: use 1-128 letters, digits, '-' or '_', starting with a letter or digit"
            ),
        ))
    }
}

impl JobSpec {
    /// Checks that every broker name the job's fires derive (its topic routing key
    /// `<app>.<name>`, its group's queues, each listed zone's queue and routing key) fits
    /// RabbitMQ's 255-byte limit, naming the API field to blame: `name` for the routing
    /// key, `target.zones[i]` for a zone. Each name alone is checked first
    /// ([`validate_name`]).
    pub fn validate_topology(&self) -> Result<(), FieldError> {
        let target = &self.settings.target;
        topology::check_job_topology(
            &self.app,
            &self.name,
            &target.group,
            target.mode,
            target.zones.as_deref(),
        )
        .map_err(|error| name_error(&error))
    }
}

/// A topology name check's failure as the API reports it, naming the job field at fault.
pub fn name_error(error: &NameError) -> FieldError {
    let field = match error.field() {
        NameField::App => "app".to_string(),
        NameField::Job => "name".to_string(),
        NameField::Group => "target.group".to_string(),
        NameField::Zone(i) => format!("target.zones[{i}]"),
        NameField::Instance => "instance".to_string(),
        NameField::Observer => "observer".to_string(),
        NameField::Pattern(i) => format!("patterns[{i}]"),
    };
    let message = match error {
        NameError::TooLong { .. } => format!(
            "{error}: names joined into one broker name share its {} bytes (see docs/api.md)",
            topology::MAX_SHORT_STRING
        ),
        NameError::Invalid { .. } => error.to_string(),
    };
    FieldError::new(field, message)
}

/// Checks the payload fits in `limit` bytes of JSON.
pub fn validate_payload_size(payload: &Value, limit: usize) -> Result<(), FieldError> {
    let size = serde_json::to_vec(payload).map_or(usize::MAX, |v| v.len());
    if size > limit {
        Err(FieldError::new(
            "payload",
            format!("payload is {size} bytes of JSON, over the limit of {limit} bytes"),
        ))
    } else {
        Ok(())
    }
}

/// Checks the payload holds no NUL character, which PostgreSQL cannot store; refused on
/// every store so both behave alike.
pub fn validate_payload_text(payload: &Value) -> Result<(), FieldError> {
    fn has_nul(value: &Value) -> bool {
        match value {
            Value::String(s) => s.contains('\0'),
            Value::Array(items) => items.iter().any(has_nul),
            Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
            _ => false,
        }
    }
    if has_nul(payload) {
        Err(FieldError::new(
            "payload",
            "payload strings may not contain the NUL character (\\u0000)",
        ))
    } else {
        Ok(())
    }
}

impl JobSettings {
    /// Checks bounds that the types alone do not express.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.target.validate()?;
        self.window.validate()?;
        let ack = self.ack_timeout.get();
        if !(limits::MIN_ACK_TIMEOUT..=limits::MAX_ACK_TIMEOUT).contains(&ack) {
            return Err(FieldError::new(
                "ack_timeout",
                format!(
                    "ack_timeout {} is out of range: use 1s to 25m (RabbitMQ's consumer timeout is 30m)",
                    self.ack_timeout
                ),
            ));
        }
        let run = self.run_timeout.get();
        if !(limits::MIN_RUN_TIMEOUT..=limits::MAX_RUN_TIMEOUT).contains(&run) {
            return Err(FieldError::new(
                "run_timeout",
                format!(
                    "run_timeout {} is out of range: use 1s to 24h",
                    self.run_timeout
                ),
            ));
        }
        self.backoff.validate()?;
        if !(1..=limits::MAX_ATTEMPTS).contains(&self.max_attempts) {
            return Err(FieldError::new(
                "max_attempts",
                format!(
                    "max_attempts {} is out of range: use 1 to {}",
                    self.max_attempts,
                    limits::MAX_ATTEMPTS
                ),
            ));
        }
        if let Some(n) = self.pause_after_failures {
            super::failure_pause::validate(n)?;
        }
        if !(1..=limits::MAX_CATCH_UP_LIMIT).contains(&self.catch_up_limit) {
            return Err(FieldError::new(
                "catch_up_limit",
                format!(
                    "catch_up_limit {} is out of range: use 1 to {}",
                    self.catch_up_limit,
                    limits::MAX_CATCH_UP_LIMIT
                ),
            ));
        }
        Ok(())
    }
}

impl Job {
    /// A new job created at `now` from `spec`, with its first fire computed.
    pub fn new(spec: JobSpec, now: DateTime<Utc>) -> Self {
        let now = super::schedule::truncate_ms(now);
        let settings = &spec.settings;
        let next_fire_at = settings.window.first_fire(&settings.schedule, now);
        Self {
            id: Uuid::now_v7(),
            spec,
            version: 1,
            next_fire_at,
            created_at: now,
            updated_at: now,
            paused_reason: None,
        }
    }

    /// The job after replacing its definition with `spec` at `now`: the version moves on,
    /// and the next fire is recomputed when the schedule or its window changed or the job
    /// was resumed (fires skipped while paused are not "missed"), inside the window.
    pub fn updated(&self, spec: JobSpec, now: DateTime<Utc>) -> Self {
        let now = super::schedule::truncate_ms(now);
        let rescheduled = spec.settings.schedule != self.spec.settings.schedule
            || window_moved(&self.spec.settings.window, &spec.settings.window);
        let resumed = self.spec.paused && !spec.paused;
        let window = &spec.settings.window;
        // A paused job keeps its reason through edits; resuming clears it.
        let paused_reason = self
            .paused_reason
            .clone()
            .filter(|_| self.spec.paused && spec.paused);
        let next_fire_at = if reschedules(&self.spec, &spec) {
            match (&spec.settings.schedule, resumed && !rescheduled) {
                // A one-shot keeps its instant until it has fired.
                (Schedule::At(_), true) => self.next_fire_at,
                (schedule, _) => window.first_fire(schedule, now),
            }
        } else {
            self.next_fire_at
        };
        Self {
            id: self.id,
            spec,
            version: self.version + 1,
            next_fire_at,
            created_at: self.created_at,
            updated_at: now,
            paused_reason,
        }
    }

    /// The fires due at `now` or armed up to `until` (see [`plan_fires`]) as new runs —
    /// one per item of each fire, see [`Target::items`] — and the next fire time. Nothing
    /// is due for a paused job or one whose next fire is after `until`.
    pub fn fires_due(
        &self,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
        grace: chrono::Duration,
        live: &LiveZones,
    ) -> JobFires {
        let Some(due) = self.timer_entry().filter(|due| *due <= until) else {
            return JobFires {
                runs: Vec::new(),
                next_fire_at: self.next_fire_at,
                misfired: false,
                fire_times: 0,
            };
        };
        let settings = &self.spec.settings;
        let plan = plan_fires_within(
            &settings.schedule,
            due,
            now,
            until,
            settings.misfire,
            settings.catch_up_limit,
            grace,
            settings.window.end_at,
        );
        let runs = plan
            .fire_times
            .iter()
            .flat_map(|t| self.new_runs(*t, RunTrigger::Schedule, now, live))
            .collect();
        JobFires {
            runs,
            next_fire_at: plan.next_fire_at,
            misfired: plan.misfired,
            fire_times: plan.fire_times.len(),
        }
    }

    /// The runs of the fire at `fire_time`, one per item (see [`Target::items`]), with
    /// the job's payload and deadlines frozen into each.
    pub fn new_runs(
        &self,
        fire_time: DateTime<Utc>,
        trigger: RunTrigger,
        now: DateTime<Utc>,
        live: &LiveZones,
    ) -> Vec<Run> {
        let settings = &self.spec.settings;
        settings
            .target
            .items(live)
            .into_iter()
            .map(|(shard, total, zone)| {
                let mut run = Run::new(self.id, fire_time, trigger, settings.payload.clone(), now)
                    .item(settings.target.mode, shard, total, zone);
                run.ack_timeout = settings.ack_timeout.get();
                run.run_timeout = settings.run_timeout.get();
                run.overlap = settings.overlap;
                // A jittered fire is not overdue before it is due.
                run.due_at = Some(super::schedule::truncate_ms(
                    now.max(self.due_time(run.fire_time, trigger)),
                ));
                run
            })
            .collect()
    }

    /// When a first attempt of this job's fire at nominal `fire_time` is published: with
    /// [`RunTrigger::Schedule`], `fire_time` plus the fire's jitter
    /// ([`Window::jitter_offset`]); a manual or backfilled fire is never jittered.
    pub fn due_time(&self, fire_time: DateTime<Utc>, trigger: RunTrigger) -> DateTime<Utc> {
        match trigger {
            RunTrigger::Schedule => self.spec.settings.window.due_time(self.id, fire_time),
            // An operator's fire goes now; a backfill's fires are spread by its rate.
            RunTrigger::Manual | RunTrigger::Backfill => fire_time,
        }
    }

    /// The task of `run` with the time it is due to be published (see [`Self::due_time`]).
    pub fn due_task(&self, run: &Run) -> DueTask {
        DueTask {
            task: self.task_message(run),
            due: self.due_time(run.fire_time, run.trigger),
        }
    }

    /// The task message of `run` of this job. `published_at` is the run's creation time
    /// until the dispatcher stamps the publish time.
    pub fn task_message(&self, run: &Run) -> TaskMessage {
        TaskMessage {
            v: PROTOCOL_VERSION,
            task_id: run.id,
            job_id: self.id,
            app: self.spec.app.clone(),
            job: self.spec.name.clone(),
            group: self.spec.settings.target.group.clone(),
            fire_time: run.fire_time,
            shard: run.shard,
            shard_total: run.shard_total,
            attempt: run.attempt,
            mode: run.mode,
            zone: run.zone.clone(),
            payload: run.payload.clone(),
            published_at: run.created_at,
            run_timeout_ms: Some(run.run_timeout.as_millis() as u64),
        }
    }

    /// Whether the timer should hold this job: active with a next fire time.
    pub fn timer_entry(&self) -> Option<DateTime<Utc>> {
        if self.spec.paused {
            None
        } else {
            self.next_fire_at
        }
    }
}

#[cfg(test)]
mod tests;
