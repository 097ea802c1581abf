//! Opening a store from a database URL. Kept apart from `mod.rs` because it names both
//! backends, and each backend names the trait defined there.

use std::sync::Arc;

use super::{PostgresStore, SqliteStore, Store, StoreError};
use crate::domain::shard::DEFAULT_SHARD_COUNT;

/// Opens the store at `url` (`sqlite://FILE` or `postgres://...`) and applies migrations;
/// a new PostgreSQL cluster gets the default shard count.
pub async fn open(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match open_backend(url, DEFAULT_SHARD_COUNT).await? {
        Backend::Sqlite(store) => Arc::new(store),
        Backend::Postgres(store) => Arc::new(store),
    })
}

/// A store with its concrete backend, for what only one backend does: PostgreSQL
/// coordinates a cluster, SQLite is locked to one node.
#[derive(Debug, Clone)]
pub enum Backend {
    /// The embedded single-node store.
    Sqlite(SqliteStore),
    /// The clustered store.
    Postgres(PostgresStore),
}

impl Backend {
    /// The store behind the common trait.
    pub fn store(&self) -> Arc<dyn Store> {
        match self {
            Backend::Sqlite(store) => Arc::new(store.clone()),
            Backend::Postgres(store) => Arc::new(store.clone()),
        }
    }
}

/// Opens the backend at `url`; a new PostgreSQL cluster is created with `shard_count`
/// shards (an existing one keeps its own).
pub async fn open_backend(url: &str, shard_count: u32) -> Result<Backend, StoreError> {
    if url.starts_with("sqlite:") {
        Ok(Backend::Sqlite(SqliteStore::open(url).await?))
    } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        Ok(Backend::Postgres(
            PostgresStore::open(url, shard_count).await?,
        ))
    } else {
        Err(StoreError::UnsupportedUrl(url.to_string()))
    }
}
