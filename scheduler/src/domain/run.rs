//! Runs: one fire of a job (one per shard item). A run's id is the task id and the
//! idempotency key, derived from (job id, scheduled fire time, shard index).
//!
//! ```text
//!            +----------- republish (same attempt): no confirm --------+
//!            v                                                           |
//! --> scheduled --confirm--> dispatched --ack--> acked --result ok--> succeeded
//!      ^   ^                     |                 |  \
//!      |   |  ack_timeout:       |  run_timeout:   |   \--retryable failure--> failed
//!      |   +--attempt + 1 -------+--attempt + 1 ---+                              |
//!      +------------------ backoff elapsed: attempt + 1 --------------------------+
//!
//! permanent failure, or any of the above with attempts exhausted --> dead
//! dead --(dlq replay: attempt + 1)--> scheduled
//! scheduled | dispatched | acked | failed --(POST /v1/runs/{id}/cancel)--> cancelled
//! ```
//!
//! `cancelled` is final like `succeeded` and `dead` (see [`crate::domain::cancel`]): the
//! reconciler never publishes it again, and a late ack or result does not revive it.
//!
//! A `dispatched` run whose work queue has no consumer when its ack deadline passes
//! stays `dispatched` on the same attempt with [`Run::waiting_for`] =
//! [`WaitingFor::Consumer`]: its task is still in the queue, so the deadline moves on
//! by another `ack_timeout` instead of using an attempt (see `crate::reconcile`).
//!
//! A result that arrives for a run already `dead` does not revive it: the run stays
//! `dead` and its history gets the late outcome ([`late_record`]).
//!
//! Every run in an unfinished state has a `due_at`: when the reconciler acts on it if
//! nothing else happened first (see [`Run::due_at`]).

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use chime_consumer::protocol::{
    AttemptRecord, DeliveryMode, Progress, ResultMessage, TaskOutcome, item_run_id,
};

use super::{limits, overlap::OverlapPolicy, receipt::InstanceReceipt};

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Recorded; the task is not yet confirmed by the broker.
    Scheduled,
    /// The broker confirmed the task.
    Dispatched,
    /// A consumer received the task and started it.
    Acked,
    /// The handler succeeded.
    Succeeded,
    /// The attempt failed retryably; the next attempt is published at `due_at`.
    Failed,
    /// Given up: attempts exhausted, a permanent failure, or dead-lettered by the broker.
    Dead,
    /// Withdrawn by an operator (`POST /v1/runs/{id}/cancel`) before it finished.
    Cancelled,
}

impl RunState {
    /// The state's name in the API and the stores.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Scheduled => "scheduled",
            RunState::Dispatched => "dispatched",
            RunState::Acked => "acked",
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::Dead => "dead",
            RunState::Cancelled => "cancelled",
        }
    }

    /// Whether the run is over: `succeeded`, `dead` or `cancelled`. A finished run is
    /// never published again.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            RunState::Succeeded | RunState::Dead | RunState::Cancelled
        )
    }

    /// Parses a stored state name.
    pub fn parse(name: &str) -> Option<Self> {
        [
            RunState::Scheduled,
            RunState::Dispatched,
            RunState::Acked,
            RunState::Succeeded,
            RunState::Failed,
            RunState::Dead,
            RunState::Cancelled,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an unfinished run waits for: a consumer (`dispatched`), or its job's previous
/// run (`scheduled`, overlap `buffer_one`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WaitingFor {
    /// Its work queue had no consumer when the ack deadline passed: the task waits in
    /// the queue for one.
    Consumer,
    /// `scheduled` only: a fire of an overlap `buffer_one` job held until the job has no
    /// other unfinished run; it is not published before (see
    /// [`super::OverlapPolicy::BufferOne`]).
    Previous,
}

impl WaitingFor {
    /// The name in the API and the stores.
    pub fn as_str(self) -> &'static str {
        match self {
            WaitingFor::Consumer => "consumer",
            WaitingFor::Previous => "previous",
        }
    }

    /// Parses a stored name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "consumer" => Some(WaitingFor::Consumer),
            "previous" => Some(WaitingFor::Previous),
            _ => None,
        }
    }

    /// What a run in `state` read with `stored` waits for: a `dispatched` run for a
    /// consumer, a `scheduled` one for its job's previous run (the stores clear the
    /// column when a run is dispatched again, and any other state means the wait is
    /// over).
    pub fn of(state: RunState, stored: Option<&str>) -> Option<Self> {
        let wait = stored.and_then(Self::parse)?;
        match (state, wait) {
            (RunState::Dispatched, WaitingFor::Consumer)
            | (RunState::Scheduled, WaitingFor::Previous) => Some(wait),
            _ => None,
        }
    }
}

/// The history entry of a result that came for a run already given up (`dead`): the
/// run stays `dead` (its dead letter was published), and its history shows what the
/// handler did after all — event `late_success` or `late_failure`, with the attempt,
/// the consumer, when it finished and, for a failure, its error. The DLQ tools read it
/// through [`late_outcome`] to tell a dead letter whose work got done.
pub fn late_record(result: &ResultMessage) -> AttemptRecord {
    let (event, error) = match &result.outcome {
        TaskOutcome::Succeeded { .. } => (LATE_SUCCESS, None),
        TaskOutcome::Failed { error } => (LATE_FAILURE, Some(error.message.clone())),
    };
    AttemptRecord {
        attempt: result.attempt,
        event: event.into(),
        at: result.finished_at,
        consumer: Some(result.consumer.clone()),
        error,
        retry_at: None,
    }
}

/// [`late_record`]'s event for a late success.
pub const LATE_SUCCESS: &str = "late_success";
/// [`late_record`]'s event for a late failure.
pub const LATE_FAILURE: &str = "late_failure";

/// The latest late outcome in a `dead` run's history (see [`late_record`]), if any.
pub fn late_outcome(history: &[AttemptRecord]) -> Option<&AttemptRecord> {
    history
        .iter()
        .rev()
        .find(|r| r.event == LATE_SUCCESS || r.event == LATE_FAILURE)
}

/// What caused a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunTrigger {
    /// The job's schedule.
    Schedule,
    /// `POST /v1/jobs/{id}/trigger`.
    Manual,
    /// `POST /v1/jobs/{id}/backfill`: a past fire of the schedule, with the same run id
    /// as the scheduled fire it stands for.
    Backfill,
}

impl RunTrigger {
    /// The trigger's name in the API and the stores.
    pub fn as_str(self) -> &'static str {
        match self {
            RunTrigger::Schedule => "schedule",
            RunTrigger::Manual => "manual",
            RunTrigger::Backfill => "backfill",
        }
    }

    /// Parses a stored trigger name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "schedule" => Some(RunTrigger::Schedule),
            "manual" => Some(RunTrigger::Manual),
            "backfill" => Some(RunTrigger::Backfill),
            _ => None,
        }
    }
}

/// One fire of a job.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// Task id and idempotency key.
    pub id: Uuid,
    /// The job.
    pub job_id: Uuid,
    /// Scheduled fire time (ms precision).
    pub fire_time: DateTime<Utc>,
    /// Shard index.
    pub shard: u32,
    /// Shard items of this fire.
    pub shard_total: u32,
    /// Delivery attempt, from 1.
    pub attempt: u32,
    /// Current state.
    pub state: RunState,
    /// What caused it.
    pub trigger: RunTrigger,
    /// The payload sent, frozen when the run was recorded.
    pub payload: Value,
    /// When the run was recorded.
    pub created_at: DateTime<Utc>,
    /// When the broker confirmed the task.
    pub dispatched_at: Option<DateTime<Utc>>,
    /// When a consumer acked it.
    pub acked_at: Option<DateTime<Utc>>,
    /// When the handler finished.
    pub finished_at: Option<DateTime<Utc>>,
    /// Consumer instance that acked or finished it last.
    pub consumer: Option<String>,
    /// The scheduler node that recorded it.
    pub fired_by: Option<String>,
    /// The handler's output.
    pub output: Option<Value>,
    /// Why it failed, or why publishing it did not succeed yet.
    pub error: Option<String>,
    /// How long a dispatched attempt may wait for an ack (frozen from the job).
    pub ack_timeout: std::time::Duration,
    /// How long an acked attempt may go without a result or heartbeat (frozen from the job).
    pub run_timeout: std::time::Duration,
    /// When the reconciler looks at the run next: for `scheduled`, when it entered that
    /// state or, for a fire armed ahead of time, its fire time (re-published once it is
    /// `republish_after` old); `dispatched`: the ack
    /// deadline; `acked`: the result deadline (moved by heartbeats); `failed`: when the
    /// retry is due; `dead`: set until the dead letter is confirmed. None once nothing is
    /// pending.
    pub due_at: Option<DateTime<Utc>>,
    /// Attempts that did not succeed, oldest first.
    pub history: Vec<AttemptRecord>,
    /// The handler's latest progress report.
    pub progress: Option<Progress>,
    /// When the consumer last sent a heartbeat.
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// The job's delivery mode when the run was recorded.
    pub mode: DeliveryMode,
    /// The zone this item is for (`zone` mode).
    pub zone: Option<String>,
    /// The job's overlap policy when the run was recorded, brought up to date while the
    /// run is unfinished when the job changes to `forbid`: only such runs are indexed
    /// as unfinished, so a fire of any other job writes no index entry for it.
    pub overlap: OverlapPolicy,
    /// `broadcast` mode: what each consumer instance did with the current and earlier
    /// attempts (one entry per instance, its latest attempt).
    pub instances: Vec<InstanceReceipt>,
    /// `dispatched`: why its ack deadline was moved on without using an attempt (its
    /// queue had no consumer); `scheduled`: a held `buffer_one` fire waiting for the
    /// job's previous run. None otherwise.
    pub waiting_for: Option<WaitingFor>,
    /// `cancelled` only: who cancelled it (the API token's name); `finished_at` says when.
    pub cancelled_by: Option<String>,
}

impl Run {
    /// A new run in state `scheduled` for the fire of `job_id` at `fire_time`.
    pub fn new(
        job_id: Uuid,
        fire_time: DateTime<Utc>,
        trigger: RunTrigger,
        payload: Value,
        now: DateTime<Utc>,
    ) -> Self {
        let fire_time = super::schedule::truncate_ms(fire_time);
        let id = item_run_id(job_id, fire_time, trigger == RunTrigger::Manual, 0, None);
        Self {
            id,
            job_id,
            fire_time,
            shard: 0,
            shard_total: 1,
            attempt: 1,
            state: RunState::Scheduled,
            trigger,
            payload,
            created_at: super::schedule::truncate_ms(now),
            dispatched_at: None,
            acked_at: None,
            finished_at: None,
            consumer: None,
            fired_by: None,
            output: None,
            error: None,
            ack_timeout: limits::DEFAULT_ACK_TIMEOUT,
            run_timeout: limits::DEFAULT_RUN_TIMEOUT,
            // An armed fire (recorded ahead of its time) is not overdue before it is due.
            due_at: Some(super::schedule::truncate_ms(now.max(fire_time))),
            history: Vec::new(),
            progress: None,
            heartbeat_at: None,
            mode: DeliveryMode::Group,
            zone: None,
            overlap: OverlapPolicy::Allow,
            instances: Vec::new(),
            waiting_for: None,
            cancelled_by: None,
        }
    }

    /// This run as item `shard` of `total` (for `zone` mode: the item of `zone`) of a
    /// job delivered in `mode`, with the item's own id (see [`item_run_id`]).
    pub fn item(
        mut self,
        mode: DeliveryMode,
        shard: u32,
        total: u32,
        zone: Option<String>,
    ) -> Self {
        self.id = item_run_id(
            self.job_id,
            self.fire_time,
            self.trigger == RunTrigger::Manual,
            shard,
            zone.as_deref(),
        );
        self.mode = mode;
        self.shard = shard;
        self.shard_total = total;
        self.zone = zone;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_deterministic_per_fire() {
        let job = Uuid::now_v7();
        let t: DateTime<Utc> = "2026-11-21T10:00:00.123456Z".parse().unwrap();
        let a = Run::new(job, t, RunTrigger::Schedule, Value::Null, t);
        assert_eq!(
            a.id,
            Run::new(job, t, RunTrigger::Schedule, Value::Null, t).id
        );
        let b = Run::new(job, t, RunTrigger::Manual, Value::Null, t);
        assert_ne!(
            a.id, b.id,
            "a trigger in the same millisecond is a fire of its own"
        );
        let c = Run::new(job, t, RunTrigger::Backfill, Value::Null, t);
        assert_eq!(a.id, c.id, "a backfilled fire is the scheduled fire");
        assert_eq!(a.fire_time.timestamp_subsec_micros(), 123_000);
    }

    #[test]
    fn state_names_round_trip() {
        for s in [
            "scheduled",
            "dispatched",
            "acked",
            "succeeded",
            "failed",
            "dead",
            "cancelled",
        ] {
            assert_eq!(RunState::parse(s).unwrap().as_str(), s);
        }
        assert_eq!(RunState::parse("bogus"), None);
        for t in ["schedule", "manual", "backfill"] {
            assert_eq!(RunTrigger::parse(t).unwrap().as_str(), t);
        }
    }

    #[test]
    fn a_late_result_is_a_history_entry_of_its_own() {
        let at: DateTime<Utc> = "2026-11-21T10:00:00Z".parse().unwrap();
        let mut result = ResultMessage {
            v: 1,
            task_id: Uuid::now_v7(),
            attempt: 3,
            consumer: "w2".into(),
            finished_at: at,
            replayed: false,
            outcome: TaskOutcome::Succeeded { output: None },
        };
        let success = late_record(&result);
        assert_eq!(
            (
                success.event.as_str(),
                success.attempt,
                success.at,
                success.error
            ),
            (LATE_SUCCESS, 3, at, None)
        );
        result.outcome = TaskOutcome::Failed {
            error: chime_consumer::protocol::TaskError {
                message: "boom".into(),
                retryable: true,
                retry_after_ms: None,
            },
        };
        let failure = late_record(&result);
        assert_eq!(failure.event, LATE_FAILURE);
        assert_eq!(failure.error.as_deref(), Some("boom"));
        let timeout = AttemptRecord {
            event: "ack_timeout".into(),
            ..failure.clone()
        };
        assert_eq!(late_outcome(std::slice::from_ref(&timeout)), None);
        let history = [
            failure,
            timeout,
            late_record(&ResultMessage {
                outcome: TaskOutcome::Succeeded { output: None },
                ..result
            }),
        ];
        assert_eq!(
            late_outcome(&history).map(|r| r.event.as_str()),
            Some(LATE_SUCCESS)
        );
    }

    #[test]
    fn only_a_dispatched_run_waits_for_a_consumer() {
        let consumer = Some(WaitingFor::Consumer);
        assert_eq!(
            WaitingFor::of(RunState::Dispatched, Some("consumer")),
            consumer
        );
        assert_eq!(WaitingFor::of(RunState::Dispatched, None), None);
        assert_eq!(WaitingFor::of(RunState::Dispatched, Some("bogus")), None);
        for state in [RunState::Scheduled, RunState::Acked, RunState::Dead] {
            assert_eq!(WaitingFor::of(state, Some("consumer")), None);
        }
    }
}
