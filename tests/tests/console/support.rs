//! The console scenarios' set-up: a vhost, a store, `chimed`, a consumer of group
//! `console` and a signed-in browser.

use chime_tests::{
    Chimed, TestConsumer, TestDatabase, TestVhost, api::Api, browser::Browser, chimed::ChimedConfig,
};

/// Which store a scenario runs on.
#[derive(Debug, Clone, Copy)]
pub enum StoreKind {
    Sqlite,
    Postgres,
}

/// The consumer group every scenario's jobs target.
pub const GROUP: &str = "console";

/// What a scenario runs against. Fields drop in order: the browser first, chimed last
/// but one, the database and vhost after it.
pub struct Console {
    pub browser: Browser,
    pub consumer: Option<TestConsumer>,
    pub chimed: Chimed,
    pub api: Api,
    /// Held so the scenario's database lives as long as its chimed.
    _db: TestDatabase,
    pub vhost: TestVhost,
}

impl Console {
    /// chimed on `kind` with a consumer of [`GROUP`], and a browser signed in as the
    /// bootstrap admin.
    pub async fn start(kind: StoreKind) -> Self {
        let console = Self::start_signed_out(kind).await;
        let token = console.chimed.token().to_string();
        console.sign_in(&token).await;
        console
    }

    /// The same, with the browser on the sign-in page.
    pub async fn start_signed_out(kind: StoreKind) -> Self {
        let vhost = TestVhost::new();
        let db = match kind {
            StoreKind::Sqlite => TestDatabase::sqlite(),
            StoreKind::Postgres => TestDatabase::postgres().await,
        };
        let chimed = Chimed::start(ChimedConfig::new(db.url(), &vhost.amqp_url())).await;
        let api = Api::new(format!("http://127.0.0.1:{}", chimed.port()))
            .with_token(Some(chimed.token()));
        let consumer =
            TestConsumer::start(&vhost.amqp_url(), GROUP, "console-consumer-1", &[]).await;
        let browser = Browser::start().await;
        let console = Self {
            browser,
            consumer: Some(consumer),
            chimed,
            api,
            _db: db,
            vhost,
        };
        console.browser.open(&console.url("")).await;
        console.browser.wait_page("signin").await;
        console
    }

    /// The console's address with `hash` (e.g. `#/jobs`).
    pub fn url(&self, hash: &str) -> String {
        format!("http://127.0.0.1:{}/{hash}", self.chimed.port())
    }

    /// Signs in with `token` on the sign-in page and waits for the overview.
    pub async fn sign_in(&self, token: &str) {
        self.browser.fill("input[name=token]", token).await;
        self.browser.click("button[type=submit]").await;
        self.browser.wait_page("overview").await;
    }

    /// Opens `hash` and waits for page `name` to have rendered.
    pub async fn visit(&self, hash: &str, name: &str) {
        self.browser.open(&self.url(hash)).await;
        self.browser.wait_page(name).await;
    }

    /// Creates a token of `role` on `apps` through the API; returns its secret.
    pub async fn token(&self, name: &str, role: &str, apps: &[&str]) -> String {
        let (status, body) = self
            .api
            .call(
                reqwest::Method::POST,
                "/v1/tokens",
                Some(&serde_json::json!({"name": name, "role": role, "apps": apps})),
            )
            .await;
        assert_eq!(status, reqwest::StatusCode::CREATED, "{body}");
        body["token"].as_str().expect("a secret").to_string()
    }

    /// Asserts the browser logged no error (and no request failed) since the last read.
    pub async fn assert_no_console_errors(&self, after: &str) {
        let errors = self.browser.console_errors().await;
        assert!(
            errors.is_empty(),
            "console errors after {after}: {errors:#?}"
        );
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
