//! Runs on SQLite: marking them dispatched, reading them, and the single-run changes
//! (broadcast receipts, notes).

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{SqliteConnection, SqlitePool};
use uuid::Uuid;

use chime_consumer::protocol::AttemptRecord;

use super::rows::{ms, opt_ms, record_text, run_from_row, uuid};
use crate::domain::{JobSettings, Run};
use crate::store::{MAX_NOTES, RunChange, RunPage, StoreError, corrupt};

pub(super) async fn mark_dispatched(
    writer: &SqlitePool,
    run_ids: &[Uuid],
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    if run_ids.is_empty() {
        return Ok(());
    }
    let ids = serde_json::to_string(&run_ids).expect("uuids serialise");
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
    sqlx::query(
        "UPDATE runs SET state = 'dispatched', dispatched_at = ?1, error = NULL, waiting_for = NULL,
             due_at = ?1 + ack_timeout_ms
         WHERE id IN (SELECT value FROM json_each(?2)) AND state = 'scheduled'",
    )
    .bind(ms(at))
    .bind(ids)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

pub(super) async fn note_publish_failure(
    writer: &SqlitePool,
    run_id: Uuid,
    reason: &str,
) -> Result<(), StoreError> {
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
    sqlx::query("UPDATE runs SET error = ? WHERE id = ? AND state = 'scheduled'")
        .bind(reason)
        .bind(run_id.to_string())
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

pub(super) async fn get_run(readers: &SqlitePool, id: Uuid) -> Result<Option<Run>, StoreError> {
    sqlx::query(concat!(
        "SELECT ",
        run_columns!(),
        " FROM runs WHERE id = ?"
    ))
    .bind(id.to_string())
    .fetch_optional(readers)
    .await?
    .as_ref()
    .map(run_from_row)
    .transpose()
}

pub(super) async fn list_runs(
    readers: &SqlitePool,
    job_id: Uuid,
    page: &RunPage,
) -> Result<Vec<Run>, StoreError> {
    let (before_time, before_id) = match page.before {
        Some((t, id)) => (Some(ms(t)), Some(id.to_string())),
        None => (None, None),
    };
    sqlx::query(concat!(
        "SELECT ",
        run_columns!(),
        " FROM runs WHERE job_id = ?1 AND (?2 IS NULL OR (fire_time, id) < (?2, ?3))
          ORDER BY fire_time DESC, id DESC LIMIT ?4"
    ))
    .bind(job_id.to_string())
    .bind(before_time)
    .bind(before_id)
    .bind(page.limit)
    .fetch_all(readers)
    .await?
    .iter()
    .map(run_from_row)
    .collect()
}

pub(super) async fn scheduled_runs(
    readers: &SqlitePool,
    run_ids: &[Uuid],
) -> Result<HashSet<Uuid>, StoreError> {
    if run_ids.is_empty() {
        return Ok(HashSet::new());
    }
    let ids = serde_json::to_string(&run_ids).expect("uuids serialise");
    let rows: Vec<String> = sqlx::query_scalar(
        "SELECT id FROM runs WHERE id IN (SELECT value FROM json_each(?)) AND state = 'scheduled'",
    )
    .bind(ids)
    .fetch_all(readers)
    .await?;
    rows.iter().map(|id| uuid("run", id)).collect()
}

pub(super) async fn fire_items(
    readers: &SqlitePool,
    job_id: Uuid,
    fire_time: DateTime<Utc>,
) -> Result<Vec<Run>, StoreError> {
    let rows = sqlx::query(concat!(
        "SELECT ",
        run_columns!(),
        " FROM runs WHERE job_id = ? AND fire_time = ? ORDER BY shard, zone"
    ))
    .bind(job_id.to_string())
    .bind(ms(fire_time))
    .fetch_all(readers)
    .await?;
    rows.iter().map(run_from_row).collect()
}

pub(super) async fn update_run(
    writer: &SqlitePool,
    run_id: Uuid,
    change: &RunChange<'_>,
) -> Result<Option<(bool, Run)>, StoreError> {
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
    let Some((mut run, settings)) = read_run(&mut tx, run_id).await? else {
        return Ok(None);
    };
    if !change(&mut run, &settings) {
        return Ok(Some((false, run)));
    }
    write_run(&mut tx, &run).await?;
    tx.commit().await?;
    Ok(Some((true, run)))
}

/// Reads run `run_id` with its job's settings, inside the caller's write transaction
/// (which already excludes other writers); `None` if the run or its job does not exist.
pub(super) async fn read_run(
    conn: &mut SqliteConnection,
    run_id: Uuid,
) -> Result<Option<(Run, JobSettings)>, StoreError> {
    let Some(row) = sqlx::query(concat!(
        "SELECT ",
        run_columns!(),
        " FROM runs WHERE id = ?"
    ))
    .bind(run_id.to_string())
    .fetch_optional(&mut *conn)
    .await?
    else {
        return Ok(None);
    };
    let run = run_from_row(&row)?;
    let Some(settings) = sqlx::query_scalar::<_, String>("SELECT settings FROM jobs WHERE id = ?")
        .bind(run.job_id.to_string())
        .fetch_optional(&mut *conn)
        .await?
    else {
        return Ok(None);
    };
    let settings: JobSettings =
        serde_json::from_str(&settings).map_err(|e| corrupt(format!("job {}", run.job_id), e))?;
    Ok(Some((run, settings)))
}

/// Writes back what a single-run change may alter of `run` (read by [`read_run`]).
pub(super) async fn write_run(conn: &mut SqliteConnection, run: &Run) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE runs SET state = ?2, attempt = ?3, dispatched_at = ?4, acked_at = ?5,
             finished_at = ?6, consumer = ?7, output = ?8, error = ?9, due_at = ?10,
             history = ?11, progress = ?12, heartbeat_at = ?13, instances = ?14,
             cancelled_by = ?15
         WHERE id = ?1",
    )
    .bind(run.id.to_string())
    .bind(run.state.as_str())
    .bind(run.attempt)
    .bind(opt_ms(run.dispatched_at))
    .bind(opt_ms(run.acked_at))
    .bind(opt_ms(run.finished_at))
    .bind(&run.consumer)
    .bind(run.output.as_ref().map(Value::to_string))
    .bind(&run.error)
    .bind(opt_ms(run.due_at))
    .bind(serde_json::to_string(&run.history).expect("history serialises"))
    .bind(
        run.progress
            .as_ref()
            .map(|p| serde_json::to_string(p).expect("progress serialises")),
    )
    .bind(opt_ms(run.heartbeat_at))
    .bind(serde_json::to_string(&run.instances).expect("receipts serialise"))
    .bind(&run.cancelled_by)
    .execute(conn)
    .await?;
    Ok(())
}

pub(super) async fn note_on_run(
    writer: &SqlitePool,
    run_id: Uuid,
    record: &AttemptRecord,
) -> Result<bool, StoreError> {
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
    let noted = sqlx::query(
        "UPDATE runs SET history = json_insert(history, '$[#]', json(?2)) WHERE id = ?1 AND json_array_length(history) < ?3",
    )
    .bind(run_id.to_string())
    .bind(record_text(Some(record)))
    .bind(MAX_NOTES as i64)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    tx.commit().await?;
    Ok(noted)
}
