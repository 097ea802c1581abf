//! The audit trail on PostgreSQL: append entries, search them newest first, prune old ones.

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row, types::Json};

use super::retention::delete_batch;
use crate::domain::audit::{AuditEntry, AuditQuery};
use crate::store::StoreError;

pub(super) async fn insert_audit(pool: &PgPool, entries: &[AuditEntry]) -> Result<(), StoreError> {
    if entries.is_empty() {
        return Ok(());
    }
    // One statement for a batch import's thousands of entries.
    let rows: Vec<_> = entries
        .iter()
        .map(|e| {
            serde_json::json!({
                "id": e.id, "at": e.at, "actor": e.actor, "action": e.action,
                "target": e.target, "app": e.app, "change": e.change,
            })
        })
        .collect();
    sqlx::query(
        "INSERT INTO audit (id, at, actor, action, target, app, change)
         SELECT (r->>'id')::uuid, (r->>'at')::timestamptz, r->>'actor', r->>'action',
                r->>'target', r->>'app', r->'change'
         FROM jsonb_array_elements($1) AS r",
    )
    .bind(Json(rows))
    .execute(pool)
    .await?;
    Ok(())
}

pub(super) async fn list_audit(
    pool: &PgPool,
    query: &AuditQuery,
) -> Result<Vec<AuditEntry>, StoreError> {
    let (before_at, before_id) = query.before.unzip();
    let rows = sqlx::query(
        "SELECT id, at, actor, action, target, app, change FROM audit
         WHERE ($1::text IS NULL OR actor = $1) AND ($2::text IS NULL OR action = $2)
           AND ($3::text IS NULL OR target = $3) AND ($4::text[] IS NULL OR app = ANY($4))
           AND ($5::timestamptz IS NULL OR at >= $5) AND ($6::timestamptz IS NULL OR at < $6)
           AND ($7::timestamptz IS NULL OR (at, id) < ($7, $8))
         ORDER BY at DESC, id DESC LIMIT $9",
    )
    .bind(&query.actor)
    .bind(&query.action)
    .bind(&query.target)
    .bind(&query.apps)
    .bind(query.since)
    .bind(query.until)
    .bind(before_at)
    .bind(before_id)
    .bind(i64::from(query.limit))
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| {
            let Json(change) = row.try_get("change")?;
            Ok(AuditEntry {
                id: row.try_get("id")?,
                at: row.try_get("at")?,
                actor: row.try_get("actor")?,
                action: row.try_get("action")?,
                target: row.try_get("target")?,
                app: row.try_get("app")?,
                change,
            })
        })
        .collect()
}

pub(super) async fn prune_audit(
    pool: &PgPool,
    cutoff: DateTime<Utc>,
    limit: u32,
) -> Result<u64, StoreError> {
    delete_batch(
        pool,
        "DELETE FROM audit WHERE id IN (SELECT id FROM audit
             WHERE at < $1 ORDER BY at LIMIT $2 FOR UPDATE SKIP LOCKED)",
        cutoff,
        limit,
    )
    .await
}
