//! The consumers shape of the HTTP API (`GET /v1/consumers`): the consumer instances
//! `chimed` has heard from, and per group its live instances and queued work.

use serde::{Deserialize, Serialize};

/// The query of `GET /v1/consumers`.
#[derive(Debug, Default, Serialize, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ConsumersQuery {
    /// Only this group.
    pub group: Option<String>,
    /// `include` to list instances no longer live too; `exclude` (the default) lists
    /// live ones only.
    pub stale: Option<String>,
}

/// The answer of `GET /v1/consumers`.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ConsumersResponse {
    /// Instances by group, then instance id.
    pub instances: Vec<ConsumerResponse>,
    /// Groups by name: every group a job targets, an instance serves or work waits for.
    pub groups: Vec<ConsumerGroupResponse>,
}

/// One consumer instance.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ConsumerResponse {
    /// Its instance id (the `consumer` of the runs it takes).
    pub instance: String,
    /// Its consumer group.
    pub group: String,
    /// Its zone, or null.
    pub zone: Option<String>,
    /// Whether it takes the group's broadcasts.
    pub broadcast: bool,
    /// The software it reports (`name/version`), or null.
    pub version: Option<String>,
    /// Its first presence on record.
    pub first_seen: String,
    /// Its latest presence.
    pub last_seen: String,
    /// Whether its latest presence is within the last 15 s.
    pub live: bool,
    /// Runs it has acked and not finished.
    pub running: u64,
}

/// One consumer group.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ConsumerGroupResponse {
    /// The group.
    pub group: String,
    /// Its live instances.
    pub live_consumers: u64,
    /// Its runs published and not acked: tasks waiting in its queues.
    pub queued: u64,
    /// Runs its instances are running.
    pub running: u64,
    /// Work is queued and no instance is live.
    pub unattended: bool,
}
