//! The audit shapes of the HTTP API (`GET /v1/audit`, `GET /v1/jobs/{id}/versions`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::{audit::AuditEntry, timestamp::timestamp};

/// One audit entry.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditEntryResponse {
    /// Its id.
    pub id: String,
    /// When the change was made (RFC 3339, UTC).
    pub at: String,
    /// The name of the token that made it.
    pub actor: String,
    /// `job.create`, `job.update`, `job.delete`, `job.pause`, `job.resume`, `job.trigger`,
    /// `dlq.replay`, `dlq.purge`, `token.create` or `token.revoke`.
    pub action: String,
    /// `job:<id>`, `dlq:<queue>` or `token:<name>`.
    pub target: String,
    /// The app of the job concerned, if any.
    pub app: Option<String>,
    /// The change itself.
    pub change: Value,
}

impl From<&AuditEntry> for AuditEntryResponse {
    fn from(e: &AuditEntry) -> Self {
        Self {
            id: e.id.to_string(),
            at: timestamp(e.at),
            actor: e.actor.clone(),
            action: e.action.clone(),
            target: e.target.clone(),
            app: e.app.clone(),
            change: e.change.clone(),
        }
    }
}

/// The query of `GET /v1/audit`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditListQuery {
    /// Only entries of this token.
    pub actor: Option<String>,
    /// Only this action.
    pub action: Option<String>,
    /// Only entries on this target.
    pub target: Option<String>,
    /// Only entries of this app.
    pub app: Option<String>,
    /// Only entries at or after this instant (RFC 3339).
    pub since: Option<String>,
    /// Only entries before this instant (RFC 3339).
    pub until: Option<String>,
    /// Page size, default 100, at most 1000.
    pub limit: Option<u32>,
    /// The previous page's `next`.
    pub cursor: Option<String>,
}
