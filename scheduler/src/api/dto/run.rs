//! The run shapes of the HTTP API: a run ([`RunResponse`]), what each consumer instance
//! did with a broadcast run, and the items of a run's fire.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use chime_consumer::protocol::{AttemptRecord, Progress};

use crate::domain::{
    DeliveryMode, Run, RunState, RunTrigger, WaitingFor,
    broadcast::{InstanceReceipt, ReceiptState},
    fire_state::FireState,
    timestamp::timestamp,
};

/// A run as the API returns it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
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
    #[schema(value_type = crate::domain::wire_schema::DeliveryModeSchema)]
    pub mode: DeliveryMode,
    /// The zone this item is for; null unless `mode` is `zone`.
    #[serde(default)]
    pub zone: Option<String>,
    /// Delivery attempt.
    pub attempt: u32,
    /// State.
    pub state: RunState,
    /// `schedule` or `manual`.
    pub trigger: RunTrigger,
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
    pub waiting_for: Option<WaitingFor>,
    /// For a `cancelled` run: who cancelled it (the API token's name; `finished_at` says
    /// when); null otherwise.
    #[serde(default)]
    pub cancelled_by: Option<String>,
    /// Attempts that did not succeed, oldest first.
    #[schema(value_type = Vec<crate::domain::wire_schema::AttemptRecordSchema>)]
    pub history: Vec<AttemptRecord>,
    /// The handler's latest progress report.
    #[schema(value_type = Option<crate::domain::wire_schema::ProgressSchema>)]
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
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
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
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
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
            cancelled_by: run.cancelled_by.clone(),
            history: run.history.clone(),
            progress: run.progress.clone(),
            heartbeat_at: run.heartbeat_at.map(timestamp),
            instances: run.instances.iter().map(InstanceResponse::from).collect(),
            items: None,
            fire_state: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};
    use serde_json::json;

    fn run_in(state: RunState, shard: u32) -> Run {
        let mut run = Run::new(
            Uuid::nil(),
            "2026-11-21T10:00:00Z".parse().unwrap(),
            RunTrigger::Schedule,
            Value::Null,
            "2026-11-21T10:00:00Z".parse().unwrap(),
        )
        .item(DeliveryMode::Sharded, shard, 3, None);
        run.state = state;
        run
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
}
