//! The fire path on SQLite: the timer's look-ahead query and the fire transaction, which
//! records the runs [`crate::store::fire_plan`] decides on in one write transaction.

use std::collections::HashSet;

use chrono::{DateTime, Duration, Utc};
use serde_json::Value;
use sqlx::{Row, SqliteConnection, SqlitePool};
use uuid::Uuid;

use super::presence::live_zones_in;
use super::rows::{instant, job_from_row, ms, opt_ms, run_row, shard_list, uuid};
use crate::domain::{LiveZones, Run};
use crate::store::{
    DueCursor, DuePage, FireBatch, Firing, StoreError, decode_jobs,
    fire_plan::{Busy, needs_any_live_zones, waiting_jobs},
    live_since, plan_batch,
};

/// Records `runs` and returns the ids of those that were new (one already recorded is
/// left as it is). Their columns travel as one JSON array of rows, so a whole fire batch
/// costs two round trips to sqlx's SQLite worker thread instead of one per run: at a few
/// thousand fires a second those hand-offs, not SQLite, were the writer's cost. The rows are read
/// with `jsonb_each`, not `json_each`: `json_each` renders a row to text for every
/// `value ->> N` and each extraction looks the text up again, 27 times a run.
/// Call it inside a `BEGIN IMMEDIATE` transaction, so nothing records a run between the
/// check and the insert.
async fn insert_runs(
    conn: &mut SqliteConnection,
    runs: &[&Run],
) -> Result<HashSet<Uuid>, StoreError> {
    if runs.is_empty() {
        return Ok(HashSet::new());
    }
    let ids = serde_json::to_string(&runs.iter().map(|run| run.id).collect::<Vec<_>>())
        .expect("uuids serialise");
    let existing: Vec<String> =
        sqlx::query_scalar("SELECT id FROM runs WHERE id IN (SELECT value FROM json_each(?))")
            .bind(&ids)
            .fetch_all(&mut *conn)
            .await?;
    let existing = existing
        .iter()
        .map(|id| uuid("run", id))
        .collect::<Result<HashSet<_>, _>>()?;
    let new: Vec<Value> = runs
        .iter()
        .filter(|run| !existing.contains(&run.id))
        .map(|run| run_row(run))
        .collect();
    if !new.is_empty() {
        sqlx::query(concat!(
            "INSERT INTO runs (",
            run_columns!(),
            ") SELECT \
             value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5, \
             value ->> 6, value ->> 7, value ->> 8, value ->> 9, value ->> 10, value ->> 11, \
             value ->> 12, value ->> 13, value ->> 14, value ->> 15, value ->> 16, value ->> 17, \
             value ->> 18, value ->> 19, value ->> 20, value ->> 21, value ->> 22, value ->> 23, \
             value ->> 24, value ->> 25, value ->> 26, value ->> 27, NULL \
             FROM jsonb_each(?) WHERE true ON CONFLICT (id) DO NOTHING"
        ))
        .bind(Value::Array(new).to_string())
        .execute(&mut *conn)
        .await?;
    }
    Ok(runs
        .iter()
        .map(|run| run.id)
        .filter(|id| !existing.contains(id))
        .collect())
}

pub(super) async fn due_jobs(
    readers: &SqlitePool,
    after: DueCursor,
    before: DateTime<Utc>,
    limit: u32,
    shards: Option<&[u32]>,
) -> Result<DuePage, StoreError> {
    let rows = sqlx::query(
        "SELECT id, next_fire_at FROM jobs
         WHERE paused = 0 AND next_fire_at IS NOT NULL
           AND (next_fire_at, id) > (?1, ?2) AND next_fire_at < ?3
           AND (?5 IS NULL OR shard IN (SELECT value FROM json_each(?5)))
         ORDER BY next_fire_at, id LIMIT ?4",
    )
    .bind(ms(after.0))
    .bind(after.1.to_string())
    .bind(ms(before))
    .bind(limit)
    .bind(shard_list(shards))
    .fetch_all(readers)
    .await?;
    let rows = rows
        .iter()
        .map(|row| {
            let id: String = row.try_get("id")?;
            let id = uuid("job", &id)?;
            let at = instant("job", row.try_get("next_fire_at")?)?;
            Ok((id, at, DueCursor(at, id)))
        })
        .collect::<Result<_, StoreError>>()?;
    Ok(DuePage::of(rows, limit))
}

pub(super) async fn fire(
    writer: &SqlitePool,
    job_ids: &[Uuid],
    now: DateTime<Utc>,
    grace: Duration,
    firing: &Firing,
) -> Result<FireBatch, StoreError> {
    // Single node: the file lock (see `lock_single_node`) is the fence.
    let ids = serde_json::to_string(&job_ids).expect("uuids serialise");
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
    let jobs = sqlx::query(concat!(
        "SELECT ",
        job_read_columns!(),
        " FROM jobs WHERE id IN (SELECT value FROM json_each(?))"
    ))
    .bind(&ids)
    .fetch_all(&mut *tx)
    .await?;
    let jobs = decode_jobs(&jobs, job_from_row);
    // Only jobs whose overlap policy waits need to know about unfinished runs.
    let waiting = waiting_jobs(&jobs);
    let rows: Vec<(String, bool)> = if waiting.is_empty() {
        Vec::new()
    } else {
        sqlx::query_as(concat!(
            "SELECT job_id, max(coalesce(",
            held_run!(),
            ", 0)) FROM runs WHERE job_id IN (SELECT value FROM json_each(?)) AND ",
            forbidding_runs!(),
            " GROUP BY job_id"
        ))
        .bind(serde_json::to_string(&waiting).expect("uuids serialise"))
        .fetch_all(&mut *tx)
        .await?
    };
    let mut busy = Busy::default();
    for (id, held) in &rows {
        let id = uuid("run", id)?;
        busy.running.insert(id);
        if *held {
            busy.held.insert(id);
        }
    }
    let live = if needs_any_live_zones(&jobs) {
        live_zones_in(&mut *tx, live_since(now)).await?
    } else {
        LiveZones::default()
    };
    let plan = plan_batch(job_ids, &jobs, &busy, now, grace, firing, &live);
    let runs: Vec<&Run> = plan.runs().collect();
    let inserted = insert_runs(&mut tx, &runs).await?;
    if !plan.advance.is_empty() {
        let advance: Vec<Value> = plan
            .advance
            .iter()
            .map(|(id, next)| serde_json::json!([id.to_string(), opt_ms(*next)]))
            .collect();
        sqlx::query(
            "UPDATE jobs SET next_fire_at = a.next
             FROM (SELECT value ->> 0 AS id, value ->> 1 AS next FROM jsonb_each(?)) AS a
             WHERE jobs.id = a.id",
        )
        .bind(Value::Array(advance).to_string())
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(plan.into_batch(&inserted, Vec::new()))
}

/// See [`crate::store::Store::insert_backfill`].
pub(super) async fn insert_backfill(
    writer: &SqlitePool,
    job_id: Uuid,
    runs: &[Run],
    require_idle: bool,
) -> Result<Option<HashSet<Uuid>>, StoreError> {
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
    let job = job_id.to_string();
    let exists: Option<i64> = sqlx::query_scalar("SELECT 1 FROM jobs WHERE id = ?")
        .bind(&job)
        .fetch_optional(&mut *tx)
        .await?;
    if exists.is_none() {
        return Err(StoreError::JobNotFound(job_id));
    }
    if require_idle {
        let busy: Option<i64> = sqlx::query_scalar(concat!(
            "SELECT 1 FROM runs WHERE job_id = ? AND ",
            unfinished_runs!(),
            " LIMIT 1"
        ))
        .bind(&job)
        .fetch_optional(&mut *tx)
        .await?;
        if busy.is_some() {
            return Ok(None);
        }
    }
    let inserted = insert_runs(&mut tx, &runs.iter().collect::<Vec<_>>()).await?;
    tx.commit().await?;
    Ok(Some(inserted))
}

pub(super) async fn insert_run(writer: &SqlitePool, run: &Run) -> Result<bool, StoreError> {
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
    let inserted = insert_runs(&mut tx, &[run]).await?;
    tx.commit().await?;
    Ok(!inserted.is_empty())
}
