//! Fresh, real databases for tests: a SQLite file in a temporary directory, or a new
//! PostgreSQL database created on the server at `CHIME_TEST_POSTGRES_URL` (default
//! `postgres://postgres:postgres@127.0.0.1:5432/postgres`). Each is removed on drop.
//! A test that needs PostgreSQL fails loudly when the server is missing.
//!
//! The store suite, the scheduler's integration tests and the e2e harness all take their
//! databases from here; nothing in a shipped binary does.

use std::path::PathBuf;

use sqlx::{Connection, PgConnection};
use uuid::Uuid;

/// Environment variable naming the PostgreSQL server tests create databases on.
pub const POSTGRES_URL_ENV: &str = "CHIME_TEST_POSTGRES_URL";
/// Default of [`POSTGRES_URL_ENV`].
pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres:postgres@127.0.0.1:5432/postgres";

/// A database that exists for one test.
#[derive(Debug)]
pub struct TestDatabase {
    url: String,
    cleanup: Cleanup,
}

#[derive(Debug)]
enum Cleanup {
    Directory(PathBuf),
    Postgres { admin_url: String, name: String },
}

impl TestDatabase {
    /// A SQLite database file in a new temporary directory.
    pub fn sqlite() -> Self {
        let dir = std::env::temp_dir().join(format!("chime-test-{}", Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir).expect("create a temporary directory for SQLite");
        Self {
            url: format!("sqlite://{}", dir.join("chime.db").display()),
            cleanup: Cleanup::Directory(dir),
        }
    }

    /// A new, empty PostgreSQL database.
    pub async fn postgres() -> Self {
        let admin_url = admin_url();
        let name = format!("chime_test_{}", Uuid::now_v7().simple());
        let mut admin = PgConnection::connect(&admin_url).await.unwrap_or_else(|e| {
            panic!(
                "PostgreSQL is required for this test but {admin_url} is unreachable: {e}. \
                 Start it with deploy/local/postgres.sh or set {POSTGRES_URL_ENV}."
            )
        });
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .expect("create a test database");
        let _ = admin.close().await;
        Self {
            url: with_database(&admin_url, &name),
            cleanup: Cleanup::Postgres { admin_url, name },
        }
    }

    /// The database's URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        match &self.cleanup {
            Cleanup::Directory(dir) => {
                let _ = std::fs::remove_dir_all(dir);
            }
            Cleanup::Postgres { admin_url, name } => {
                let (admin_url, name) = (admin_url.clone(), name.clone());
                // Drop may run inside a runtime; use a thread with its own.
                let _ = std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("runtime for test cleanup");
                    runtime.block_on(async {
                        if let Ok(mut admin) = PgConnection::connect(&admin_url).await {
                            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                            )))
                            .execute(&mut admin)
                            .await;
                        }
                    });
                })
                .join();
            }
        }
    }
}

fn admin_url() -> String {
    std::env::var(POSTGRES_URL_ENV).unwrap_or_else(|_| DEFAULT_POSTGRES_URL.to_string())
}

/// `url` with its database path replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let authority_end = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[authority_end..]
        .find('/')
        .map_or(base.len(), |i| authority_end + i);
    let mut out = format!("{}/{name}", &base[..path_start]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    // Plaintext to the shared test server unless the URL says otherwise: with TLS
    // compiled in, sqlx's default `prefer` would negotiate TLS on every pool connection,
    // and the timing bounds of the cluster tests were set without it. TLS to PostgreSQL
    // is tested against its own private server (tests/tests/tls).
    if !query.is_some_and(|q| q.contains("sslmode=")) {
        out.push(if query.is_some() { '&' } else { '?' });
        out.push_str("sslmode=disable");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_database_name() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/postgres?sslmode=disable", "t1"),
            "postgres://u:p@h:5432/t1?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://h", "t1"),
            "postgres://h/t1?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://h/x?sslmode=require&a=b", "t1"),
            "postgres://h/t1?sslmode=require&a=b"
        );
    }
}
