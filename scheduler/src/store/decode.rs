//! Turning rows into domain types, shared by both backends: a row that cannot be read
//! is logged and left out of a batch rather than failing it, and write errors are
//! mapped to what they mean.

use std::{collections::HashMap, time::Duration as StdDuration};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{StoreError, types::OverdueRun};
use chime_consumer::protocol::DeliveryMode;

use crate::domain::{Job, OverlapPolicy, Run, RunState, RunTrigger, WaitingFor};

/// Pairs runs with their jobs (runs whose job vanished meanwhile are left out).
pub(crate) fn with_jobs(runs: Vec<Run>, jobs: Vec<Job>) -> Vec<OverdueRun> {
    let jobs: HashMap<Uuid, Job> = jobs.into_iter().map(|job| (job.id, job)).collect();
    runs.into_iter()
        .filter_map(|run| {
            let job = jobs.get(&run.job_id)?.clone();
            Some(OverdueRun { run, job })
        })
        .collect()
}

/// Decodes job rows one by one: an unreadable row is logged and left out (the fire
/// transaction then reports it as gone, and the timer drops it) instead of failing the
/// whole batch.
pub(crate) fn decode_jobs<R>(
    rows: &[R],
    decode: impl Fn(&R) -> Result<Job, StoreError>,
) -> Vec<Job> {
    decode_each(rows, decode, "job", "decode_job")
}

/// Decodes run rows one by one: an unreadable row (written around the store, e.g. an
/// unknown state) is logged, counted and left out, so it never stops a reconciler pass
/// over the other runs.
pub(crate) fn decode_runs<R>(
    rows: &[R],
    decode: impl Fn(&R) -> Result<Run, StoreError>,
) -> Vec<Run> {
    decode_each(rows, decode, "run", "decode_run")
}

/// Decodes rows one by one, logging each unreadable `row` and counting it under
/// `operation` in the store errors.
fn decode_each<R, T>(
    rows: &[R],
    decode: impl Fn(&R) -> Result<T, StoreError>,
    row: &'static str,
    operation: &'static str,
) -> Vec<T> {
    rows.iter()
        .filter_map(|r| match decode(r) {
            Ok(decoded) => Some(decoded),
            Err(error) => {
                tracing::error!(%error, row, "skipping an unreadable row");
                metrics::counter!(crate::telemetry::STORE_ERRORS, "operation" => operation)
                    .increment(1);
                None
            }
        })
        .collect()
}

pub(crate) fn corrupt(what: impl Into<String>, reason: impl ToString) -> StoreError {
    StoreError::Corrupt {
        what: what.into(),
        reason: reason.to_string(),
    }
}

/// The error of a failed write of `job`: the unique (app, name) key means a duplicate name.
pub(crate) fn job_write_error(error: sqlx::Error, job: &Job) -> StoreError {
    match &error {
        sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::DuplicateName {
            app: job.spec.app.clone(),
            name: job.spec.name.clone(),
        },
        _ => error.into(),
    }
}

/// A run's `state` column; `what` names the run in errors.
pub(crate) fn run_state(what: &str, name: &str) -> Result<RunState, StoreError> {
    RunState::parse(name).ok_or_else(|| corrupt(what, format!("state {name:?}")))
}

/// A run's `trigger` column.
pub(crate) fn run_trigger(what: &str, name: &str) -> Result<RunTrigger, StoreError> {
    RunTrigger::parse(name).ok_or_else(|| corrupt(what, format!("trigger {name:?}")))
}

/// A run's `mode` column.
pub(crate) fn delivery_mode(what: &str, name: &str) -> Result<DeliveryMode, StoreError> {
    DeliveryMode::parse(name).ok_or_else(|| corrupt(what, format!("mode {name:?}")))
}

/// A run's `overlap` column.
pub(crate) fn overlap_policy(what: &str, name: &str) -> Result<OverlapPolicy, StoreError> {
    OverlapPolicy::parse(name).ok_or_else(|| corrupt(what, format!("overlap {name:?}")))
}

/// A run's `waiting_for` column, read as what its `state` column allows (an unknown
/// value, or one the state does not wait for, reads as nothing).
pub(crate) fn waiting_for(state: &str, column: Option<String>) -> Option<WaitingFor> {
    WaitingFor::of(RunState::parse(state)?, column.as_deref())
}

/// A stored millisecond count as a duration (a negative one reads as zero).
pub(crate) fn millis(ms: i64) -> StdDuration {
    StdDuration::from_millis(ms.max(0) as u64)
}

/// A stored API token from its columns; an unknown role or an app list that is not a
/// valid scope is corruption.
#[allow(clippy::too_many_arguments)]
pub(crate) fn stored_token(
    id: Uuid,
    name: String,
    role: &str,
    apps: &[String],
    secret_sha256: String,
    created_at: DateTime<Utc>,
    created_by: String,
    revoked_at: Option<DateTime<Utc>>,
) -> Result<super::StoredToken, StoreError> {
    let what = format!("api token {name}");
    let role = crate::domain::access::Role::parse(role)
        .ok_or_else(|| corrupt(&what, format!("role {role:?}")))?;
    let apps = crate::domain::access::AppScope::from_list(apps).map_err(|e| corrupt(&what, e))?;
    Ok(super::StoredToken {
        token: crate::domain::access::ApiToken {
            id,
            name,
            role,
            apps,
            created_at,
            created_by,
            revoked_at,
        },
        secret_sha256,
    })
}
