//! Shared set-up: a vhost, a store of the chosen kind and a chimed over them.

use chime_tests::{Chimed, JobSpec, TestDatabase, TestVhost, chimed::ChimedConfig};

/// Which store a scenario runs on.
#[derive(Debug, Clone, Copy)]
pub enum StoreKind {
    Sqlite,
    Postgres,
}

/// What a scenario runs against. Fields drop in reverse order: chimed first.
pub struct Setup {
    pub chimed: Chimed,
    pub db: TestDatabase,
    pub vhost: TestVhost,
}

impl Setup {
    pub async fn new(kind: StoreKind) -> Self {
        Self::with_env(kind, &[]).await
    }

    pub async fn with_env(kind: StoreKind, env: &[(&str, &str)]) -> Self {
        let vhost = TestVhost::new();
        let db = match kind {
            StoreKind::Sqlite => TestDatabase::sqlite(),
            StoreKind::Postgres => TestDatabase::postgres().await,
        };
        let mut config = ChimedConfig::new(db.url(), &vhost.amqp_url());
        for (k, v) in env {
            config = config.env(k, v);
        }
        let chimed = Chimed::start(config).await;
        Self { chimed, db, vhost }
    }
}

/// Instantiates an `async fn scenario(kind: StoreKind)` once per store.
#[macro_export]
macro_rules! per_store {
    ($($scenario:ident),* $(,)?) => {
        $(
            mod $scenario {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$scenario($crate::support::StoreKind::Sqlite).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$scenario($crate::support::StoreKind::Postgres).await;
                }
            }
        )*
    };
}

/// A job body with every-second cron firing for `group`.
pub fn every_second(name: &str, group: &str, payload: serde_json::Value) -> serde_json::Value {
    JobSpec::new("e2e", name)
        .cron("* * * * * *")
        .group(group)
        .payload(payload)
        .build()
}
