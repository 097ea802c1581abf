//! [`Audit`]: the audit trail — every service records its changes here
//! ([`record`]), and callers read it back: a search across the trail and a job's version
//! history. Entries are written right after the change they describe; a trail that cannot
//! be written is logged and counted (`chime_audit_write_failures_total`), and the change,
//! already made, stands.

use std::sync::Arc;

use serde_json::{Value, json};
use tracing::warn;
use uuid::Uuid;

use crate::{
    domain::{
        Job,
        access::{Action, Caller, Denied},
        audit::{AuditEntry, AuditQuery, actions},
    },
    store::{Store, StoreError},
    telemetry,
};

/// Why reading the trail failed.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The caller may not read this.
    #[error(transparent)]
    Denied(#[from] Denied),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Appends `entries` to the trail; a failure is logged and counted, not returned.
pub async fn record(store: &dyn Store, entries: Vec<AuditEntry>) {
    if entries.is_empty() {
        return;
    }
    if let Err(error) = store.insert_audit(&entries).await {
        warn!(%error, entries = entries.len(), action = %entries[0].action, "cannot write the audit trail");
        metrics::counter!(telemetry::AUDIT_WRITE_FAILURES).increment(entries.len() as u64);
    }
}

/// The entry of `action` on `job` by `caller`, carrying the job's definition as it is now.
pub fn job_entry(caller: &Caller, action: &str, job: &Job) -> AuditEntry {
    AuditEntry::now(
        &caller.name,
        action,
        job_target(job.id),
        Some(&job.spec.app),
        json!({
            "version": job.version,
            "app": job.spec.app,
            "name": job.spec.name,
            "paused": job.spec.paused,
            "settings": serde_json::to_value(&job.spec.settings).unwrap_or(Value::Null),
        }),
    )
}

/// How the trail names job `id`.
pub fn job_target(id: Uuid) -> String {
    format!("job:{id}")
}

/// Reading the trail. Cheap to share.
pub struct Audit {
    store: Arc<dyn Store>,
}

impl Audit {
    /// The trail kept in `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// Entries matching `query`, newest first; a caller scoped to some apps sees only
    /// entries of its apps (token changes, of no app, are an admin's to read).
    pub async fn list(
        &self,
        caller: &Caller,
        query: &AuditQuery,
    ) -> Result<Vec<AuditEntry>, AuditError> {
        caller.check(Action::ReadJobs, None)?;
        // Asking for an app outside the token's scope is refused, as a job listing is.
        for app in query.apps.iter().flatten() {
            caller.check(Action::ReadJobs, Some(app))?;
        }
        let mut query = query.clone();
        if let Some(apps) = caller.visible_apps() {
            query.apps = Some(match query.apps {
                Some(asked) => asked.into_iter().filter(|a| apps.contains(a)).collect(),
                None => apps,
            });
        }
        Ok(self.store.list_audit(&query).await?)
    }

    /// Job `id`'s definitions, newest first: its creation, each change, pause and resume
    /// (also after the job was deleted).
    pub async fn versions(
        &self,
        caller: &Caller,
        id: Uuid,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, AuditError> {
        caller.check(Action::ReadJobs, None)?;
        let mut entries = self
            .store
            .list_audit(&AuditQuery {
                target: Some(job_target(id)),
                limit: 10_000,
                ..AuditQuery::default()
            })
            .await?;
        // A job of an app outside the token's scope is refused, as reading the job is;
        // its app is the one its entries record (also after the job was deleted).
        for app in entries.iter().filter_map(|e| e.app.as_deref()) {
            caller.check(Action::ReadJobs, Some(app))?;
        }
        entries.retain(|e| actions::VERSIONS.contains(&e.action.as_str()));
        entries.truncate(limit as usize);
        Ok(entries)
    }
}
