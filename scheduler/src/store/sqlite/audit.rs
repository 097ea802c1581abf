//! The audit trail on SQLite: append entries, search them newest first, prune old ones.

use chrono::{DateTime, Utc};
use sqlx::{Row, SqlitePool};

use super::retention::delete_batch;
use super::rows::{instant, json, ms, uuid};
use crate::domain::audit::{AuditEntry, AuditQuery};
use crate::store::StoreError;

pub(super) async fn insert_audit(
    writer: &SqlitePool,
    entries: &[AuditEntry],
) -> Result<(), StoreError> {
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
    for e in entries {
        sqlx::query(
            "INSERT INTO audit (id, at, actor, action, target, app, change)
             VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(e.id.to_string())
        .bind(ms(e.at))
        .bind(&e.actor)
        .bind(&e.action)
        .bind(&e.target)
        .bind(&e.app)
        .bind(e.change.to_string())
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

pub(super) async fn list_audit(
    readers: &SqlitePool,
    query: &AuditQuery,
) -> Result<Vec<AuditEntry>, StoreError> {
    let apps = query
        .apps
        .as_ref()
        .map(|apps| serde_json::to_string(apps).expect("a list of strings encodes"));
    let (before_at, before_id) = query.before.unzip();
    let rows = sqlx::query(
        "SELECT id, at, actor, action, target, app, change FROM audit
         WHERE (?1 IS NULL OR actor = ?1) AND (?2 IS NULL OR action = ?2)
           AND (?3 IS NULL OR target = ?3)
           AND (?4 IS NULL OR app IN (SELECT value FROM json_each(?4)))
           AND (?5 IS NULL OR at >= ?5) AND (?6 IS NULL OR at < ?6)
           AND (?7 IS NULL OR at < ?7 OR (at = ?7 AND id < ?8))
         ORDER BY at DESC, id DESC LIMIT ?9",
    )
    .bind(&query.actor)
    .bind(&query.action)
    .bind(&query.target)
    .bind(apps)
    .bind(query.since.map(ms))
    .bind(query.until.map(ms))
    .bind(before_at.map(ms))
    .bind(before_id.map(|id| id.to_string()))
    .bind(query.limit)
    .fetch_all(readers)
    .await?;
    let what = "audit entry";
    rows.iter()
        .map(|row| {
            Ok(AuditEntry {
                id: uuid(what, &row.try_get::<String, _>("id")?)?,
                at: instant(what, row.try_get("at")?)?,
                actor: row.try_get("actor")?,
                action: row.try_get("action")?,
                target: row.try_get("target")?,
                app: row.try_get("app")?,
                change: json(what, &row.try_get::<String, _>("change")?)?,
            })
        })
        .collect()
}

pub(super) async fn prune_audit(
    writer: &SqlitePool,
    cutoff: DateTime<Utc>,
    limit: u32,
) -> Result<u64, StoreError> {
    delete_batch(
        writer,
        "DELETE FROM audit WHERE rowid IN (SELECT rowid FROM audit
             WHERE at < ?1 ORDER BY at LIMIT ?2)",
        cutoff,
        limit,
    )
    .await
}
