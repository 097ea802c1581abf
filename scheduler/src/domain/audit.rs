//! The audit trail's nouns: one entry per change made through the API (who, when, what,
//! on what, and the change itself), and what a search of the trail may filter on. Pure
//! data; the application services write entries ([`crate::app::audit`]).

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

/// The actions the trail records, as the API names them.
pub mod actions {
    /// A job was created (one entry per job of a batch too).
    pub const JOB_CREATE: &str = "job.create";
    /// A job's definition changed.
    pub const JOB_UPDATE: &str = "job.update";
    /// A job was deleted.
    pub const JOB_DELETE: &str = "job.delete";
    /// A job was paused.
    pub const JOB_PAUSE: &str = "job.pause";
    /// A job was resumed.
    pub const JOB_RESUME: &str = "job.resume";
    /// A job was fired by hand.
    pub const JOB_TRIGGER: &str = "job.trigger";
    /// Past fires of a job were backfilled.
    pub const JOB_BACKFILL: &str = "job.backfill";
    /// Dead letters were replayed.
    pub const DLQ_REPLAY: &str = "dlq.replay";
    /// A run was cancelled.
    pub const RUN_CANCEL: &str = "run.cancel";
    /// A dead-letter queue was purged.
    pub const DLQ_PURGE: &str = "dlq.purge";
    /// An API token was created.
    pub const TOKEN_CREATE: &str = "token.create";
    /// An API token was revoked.
    pub const TOKEN_REVOKE: &str = "token.revoke";
    /// The actions whose entries carry a job's definition: its version history.
    pub const VERSIONS: [&str; 4] = [JOB_CREATE, JOB_UPDATE, JOB_PAUSE, JOB_RESUME];
}

/// One recorded change.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    /// Its id (time-ordered).
    pub id: Uuid,
    /// When it was made.
    pub at: DateTime<Utc>,
    /// The token that made it (its name).
    pub actor: String,
    /// What was done (see [`actions`]).
    pub action: String,
    /// What it was done to: `job:<id>`, `dlq:<queue>`, `token:<name>`.
    pub target: String,
    /// The app of the job it concerns, if it concerns one.
    pub app: Option<String>,
    /// The change: a job's definition after it, a replay's counts, a token's role.
    pub change: Value,
}

impl AuditEntry {
    /// An entry made now.
    pub fn now(
        actor: &str,
        action: &str,
        target: String,
        app: Option<&str>,
        change: Value,
    ) -> Self {
        Self {
            id: Uuid::now_v7(),
            at: Utc::now(),
            actor: actor.to_string(),
            action: action.to_string(),
            target,
            app: app.map(str::to_string),
            change,
        }
    }
}

/// A search of the trail, newest first.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    /// Only entries of this token.
    pub actor: Option<String>,
    /// Only this action.
    pub action: Option<String>,
    /// Only entries on this target.
    pub target: Option<String>,
    /// Only entries of these apps (a scoped caller's); entries of no app are then left out.
    pub apps: Option<Vec<String>>,
    /// Only entries at or after this.
    pub since: Option<DateTime<Utc>>,
    /// Only entries before this.
    pub until: Option<DateTime<Utc>>,
    /// Only entries strictly before this (at, id) position (the previous page's last).
    pub before: Option<(DateTime<Utc>, Uuid)>,
    /// At most this many.
    pub limit: u32,
}
