//! API tokens on PostgreSQL: their hashes, roles and apps (see
//! [`crate::app::tokens`] for how secrets are made and checked).

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row, postgres::PgRow, types::Json};

use crate::domain::access::ApiToken;
use crate::store::{StoreError, StoredToken, decode};

pub(super) async fn insert_token(pool: &PgPool, token: &StoredToken) -> Result<bool, StoreError> {
    let t = &token.token;
    let inserted = sqlx::query(
        "INSERT INTO api_tokens (id, name, role, apps, secret_sha256, created_at, created_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (name) DO NOTHING",
    )
    .bind(t.id)
    .bind(&t.name)
    .bind(t.role.as_str())
    .bind(Json(t.apps.to_list()))
    .bind(&token.secret_sha256)
    .bind(t.created_at)
    .bind(&t.created_by)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(inserted == 1)
}

pub(super) async fn list_tokens(pool: &PgPool) -> Result<Vec<StoredToken>, StoreError> {
    sqlx::query(
        "SELECT id, name, role, apps, secret_sha256, created_at, created_by, revoked_at
         FROM api_tokens ORDER BY name",
    )
    .fetch_all(pool)
    .await?
    .iter()
    .map(token_from_row)
    .collect()
}

pub(super) async fn revoke_token(
    pool: &PgPool,
    name: &str,
    at: DateTime<Utc>,
) -> Result<Option<ApiToken>, StoreError> {
    let row = sqlx::query(
        "UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, $2) WHERE name = $1
         RETURNING id, name, role, apps, secret_sha256, created_at, created_by, revoked_at",
    )
    .bind(name)
    .bind(at)
    .fetch_optional(pool)
    .await?;
    Ok(row
        .map(|row| token_from_row(&row))
        .transpose()?
        .map(|t| t.token))
}

fn token_from_row(row: &PgRow) -> Result<StoredToken, StoreError> {
    let Json(apps): Json<Vec<String>> = row.try_get("apps")?;
    let role: String = row.try_get("role")?;
    decode::stored_token(
        row.try_get("id")?,
        row.try_get("name")?,
        &role,
        &apps,
        row.try_get("secret_sha256")?,
        row.try_get("created_at")?,
        row.try_get("created_by")?,
        row.try_get("revoked_at")?,
    )
}
