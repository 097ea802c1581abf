//! API tokens on SQLite: their hashes, roles and apps (see [`crate::app::tokens`] for
//! how secrets are made and checked).

use chrono::{DateTime, Utc};
use sqlx::{Row, SqlitePool, sqlite::SqliteRow};

use super::rows::{instant, ms, opt_instant, uuid};
use crate::domain::access::ApiToken;
use crate::store::{StoreError, StoredToken, decode};

pub(super) async fn insert_token(
    writer: &SqlitePool,
    token: &StoredToken,
) -> Result<bool, StoreError> {
    let t = &token.token;
    let apps = serde_json::to_string(&t.apps.to_list()).expect("a list of strings encodes");
    let inserted = sqlx::query(
        "INSERT INTO api_tokens (id, name, role, apps, secret_sha256, created_at, created_by)
         VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING",
    )
    .bind(t.id.to_string())
    .bind(&t.name)
    .bind(t.role.as_str())
    .bind(apps)
    .bind(&token.secret_sha256)
    .bind(ms(t.created_at))
    .bind(&t.created_by)
    .execute(writer)
    .await?
    .rows_affected();
    Ok(inserted == 1)
}

pub(super) async fn list_tokens(readers: &SqlitePool) -> Result<Vec<StoredToken>, StoreError> {
    sqlx::query(
        "SELECT id, name, role, apps, secret_sha256, created_at, created_by, revoked_at
         FROM api_tokens ORDER BY name",
    )
    .fetch_all(readers)
    .await?
    .iter()
    .map(token_from_row)
    .collect()
}

pub(super) async fn revoke_token(
    writer: &SqlitePool,
    name: &str,
    at: DateTime<Utc>,
) -> Result<Option<ApiToken>, StoreError> {
    let row = sqlx::query(
        "UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, ?2) WHERE name = ?1
         RETURNING id, name, role, apps, secret_sha256, created_at, created_by, revoked_at",
    )
    .bind(name)
    .bind(ms(at))
    .fetch_optional(writer)
    .await?;
    Ok(row
        .map(|row| token_from_row(&row))
        .transpose()?
        .map(|t| t.token))
}

fn token_from_row(row: &SqliteRow) -> Result<StoredToken, StoreError> {
    let what = "api token";
    let id: String = row.try_get("id")?;
    let apps: String = row.try_get("apps")?;
    let apps: Vec<String> = serde_json::from_str(&apps).map_err(|e| decode::corrupt(what, e))?;
    let role: String = row.try_get("role")?;
    decode::stored_token(
        uuid(what, &id)?,
        row.try_get("name")?,
        &role,
        &apps,
        row.try_get("secret_sha256")?,
        instant(what, row.try_get("created_at")?)?,
        row.try_get("created_by")?,
        opt_instant(what, row.try_get("revoked_at")?)?,
    )
}
