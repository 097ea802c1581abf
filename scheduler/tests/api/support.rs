//! The API under test: the real router and application services over a real SQLite file
//! store, driven in process with `tower::ServiceExt::oneshot`. The timer and dispatcher
//! are built but not run (what they are told only queues up in them), so nothing fires
//! behind a test's back.
//!
//! [`TestApp::new`] points at no broker (an address nothing listens on): the job and run
//! routes do not need one (declaring a job's queues is best effort). [`TestApp::with_broker`]
//! uses the real RabbitMQ in a virtual host of its own, and fails loudly without it.

use std::sync::Arc;

use axum::{
    Router,
    body::Body,
    http::{HeaderMap, Method, Request, StatusCode, header},
};
use chime_scheduler::{
    api::{self, AppParts, AppState},
    app::{Audit, Cancellations, Consumers, Jobs, Node, Runs, Tokens},
    broker::{ConfirmedPublisher, GroupDeclarer},
    cluster::{ClusterSettings, DEFAULT_SHARD_COUNT, Ownership},
    dispatch::{Dispatcher, ObserverCopies},
    dlq::DeadLetters,
    domain::quota::Quotas,
    store::{self, Store},
    telemetry,
    timer::{Timer, TimerSettings},
};
use chime_testkit::{TestDatabase, TestVhost};
use lapin::{Connection, ConnectionProperties, options::QueueDeleteOptions};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// An AMQP URL nothing listens on.
pub const NO_BROKER: &str = "amqp://guest:guest@127.0.0.1:1/%2f";
/// The payload limit the test apps run with (bytes of JSON).
pub const PAYLOAD_LIMIT: usize = 4096;

/// One API over its own store (and vhost), with what the test may poke at.
pub struct TestApp {
    pub router: Router,
    pub jobs: Arc<Jobs>,
    pub store: Arc<dyn Store>,
    pub database: TestDatabase,
    pub amqp_url: String,
    dispatcher: Option<Dispatcher>,
    _timer: Timer,
    vhost: Option<TestVhost>,
}

/// An answer: status, headers and the body as JSON (`Value::Null` when empty, a string
/// when not JSON).
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Answer {
    /// The error code of an error answer.
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or_default()
    }

    /// The field of an error answer.
    pub fn field(&self) -> Option<&str> {
        self.body["error"]["field"].as_str()
    }

    /// Asserts an error answer of `status` and `code`.
    #[track_caller]
    pub fn assert_error(&self, status: StatusCode, code: &str) -> &Self {
        assert_eq!(
            (self.status, self.code()),
            (status, code),
            "answer body: {}",
            self.body
        );
        self
    }

    /// Asserts the error names `field`.
    #[track_caller]
    pub fn assert_field(&self, field: &str) -> &Self {
        assert_eq!(self.field(), Some(field), "answer body: {}", self.body);
        self
    }
}

impl TestApp {
    /// An API with no broker. Its fixtures give each job a group of its own
    /// ([`hourly`]), so the group quota is off here; `tests/api/quotas.rs` tests it.
    pub async fn new() -> Self {
        Self::build(NO_BROKER.to_string(), None, UNLIMITED_GROUPS).await
    }

    /// An API with no broker, enforcing `quotas`.
    pub async fn with_quotas(quotas: Quotas) -> Self {
        Self::build(NO_BROKER.to_string(), None, quotas).await
    }

    /// An API on the real RabbitMQ, in a fresh virtual host.
    pub async fn with_broker() -> Self {
        let vhost = TestVhost::new();
        Self::build(vhost.amqp_url(), Some(vhost), UNLIMITED_GROUPS).await
    }

    async fn build(amqp_url: String, vhost: Option<TestVhost>, quotas: Quotas) -> Self {
        let database = TestDatabase::sqlite();
        let backend = store::open_backend(database.url(), DEFAULT_SHARD_COUNT)
            .await
            .expect("open the SQLite store");
        let store = backend.store();
        let ownership = Ownership::single_node("api-test-node", DEFAULT_SHARD_COUNT);
        let (dispatch, dispatcher) = Dispatcher::new(
            store.clone(),
            ownership.clone(),
            &amqp_url,
            ObserverCopies::All,
        );
        let settings = TimerSettings {
            lookahead: std::time::Duration::from_secs(30),
            misfire_grace: std::time::Duration::from_secs(60),
            fire_ahead: std::time::Duration::ZERO,
        };
        let (timer_handle, timer) =
            Timer::new(store.clone(), dispatch.clone(), ownership.clone(), settings);
        let jobs = Arc::new(
            Jobs::new(
                store.clone(),
                ownership.node(),
                timer_handle,
                dispatch.clone(),
                GroupDeclarer::new(&amqp_url),
            )
            .with_quotas(quotas),
        );
        let state = AppState::new(AppParts {
            jobs: jobs.clone(),
            runs: Arc::new(Runs::new(store.clone())),
            cancellations: Arc::new(Cancellations::new(
                store.clone(),
                Arc::new(ConfirmedPublisher::new(&amqp_url, "cancels")),
            )),
            dead_letters: Arc::new(DeadLetters::new(store.clone(), &amqp_url, ownership.node())),
            node: Arc::new(Node::new(
                backend.clone(),
                ownership,
                ClusterSettings::default(),
                dispatch,
            )),
            tokens: Arc::new(Tokens::new(store.clone(), Some(ADMIN_TOKEN))),
            audit: Arc::new(Audit::new(store.clone())),
            consumers: Arc::new(Consumers::new(store.clone())),
            metrics_need_token: true,
            payload_limit: PAYLOAD_LIMIT,
            metrics: telemetry::metrics_handle(),
        });
        Self {
            router: api::router(state),
            jobs,
            store,
            database,
            amqp_url,
            dispatcher: Some(dispatcher),
            _timer: timer,
            vhost,
        }
    }

    /// Runs the dispatcher (it connects to the broker) until the returned token is
    /// cancelled.
    pub fn run_dispatcher(&mut self) -> CancellationToken {
        let drain = CancellationToken::new();
        let dispatcher = self.dispatcher.take().expect("the dispatcher runs once");
        tokio::spawn(dispatcher.run(drain.clone(), std::time::Duration::from_secs(1)));
        drain
    }

    /// Sends `request` through the router, as the bootstrap admin unless the request
    /// carries its own `Authorization` (or [`NO_TOKEN`] to send none).
    pub async fn send(&self, mut request: Request<Body>) -> Answer {
        let headers = request.headers_mut();
        match headers.get(header::AUTHORIZATION) {
            None => {
                let admin = format!("Bearer {ADMIN_TOKEN}");
                headers.insert(header::AUTHORIZATION, admin.parse().unwrap());
            }
            Some(value) if value == NO_TOKEN => {
                headers.remove(header::AUTHORIZATION);
            }
            Some(_) => {}
        }
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("the router is infallible");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), 16 << 20)
            .await
            .expect("read the answer");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        Answer {
            status,
            headers,
            body,
        }
    }

    /// `method path` with no body.
    pub async fn call(&self, method: Method, path: &str) -> Answer {
        self.send(request(method, path).body(Body::empty()).unwrap())
            .await
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Answer {
        self.call(Method::GET, path).await
    }

    /// `method path` with a JSON body.
    pub async fn json(&self, method: Method, path: &str, body: &Value) -> Answer {
        self.raw(method, path, body.to_string()).await
    }

    /// `method path` with `body` sent as JSON, whatever it holds.
    pub async fn raw(&self, method: Method, path: &str, body: impl Into<Body>) -> Answer {
        self.send(
            request(method, path)
                .header(header::CONTENT_TYPE, "application/json")
                .body(body.into())
                .unwrap(),
        )
        .await
    }

    /// Publishes `body` straight into `queue` (through the default exchange), confirmed.
    pub async fn publish_to_queue(&self, queue: &str, body: &[u8]) {
        let vhost = self.vhost.as_ref().expect("this test app has no broker");
        vhost.publish("", queue, body).await;
    }

    /// Deletes `queue`.
    pub async fn delete_queue(&self, queue: &str) {
        let connection = self.broker().await;
        let channel = connection.create_channel().await.expect("open a channel");
        channel
            .queue_delete(queue.into(), QueueDeleteOptions::default())
            .await
            .expect("delete the queue");
        let _ = connection.close(200, "done".into()).await;
    }

    async fn broker(&self) -> Connection {
        assert!(self.vhost.is_some(), "this test app has no broker");
        Connection::connect(&self.amqp_url, ConnectionProperties::default())
            .await
            .expect("connect to the test vhost")
    }

    /// Creates a job (201 expected) and returns it.
    pub async fn create(&self, job: &Value) -> Value {
        let answer = self.json(Method::POST, "/v1/jobs", job).await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
        answer.body
    }
}

/// The default quotas without the group quota.
const UNLIMITED_GROUPS: Quotas = Quotas {
    max_jobs: 1_000_000,
    max_groups: 0,
};

/// The bootstrap admin token every test app accepts.
pub const ADMIN_TOKEN: &str = "chime_test_admin_token_0123456789abcdef0123456789";
/// An `Authorization` value [`TestApp::send`] removes: the request goes without a token.
pub const NO_TOKEN: &str = "none";

/// A request builder for `method path`.
pub fn request(method: Method, path: &str) -> axum::http::request::Builder {
    Request::builder().method(method).uri(path)
}

/// A group job of `name` firing every hour (so never during a test).
pub fn hourly(name: &str) -> Value {
    json!({
        "app": "api-test",
        "name": name,
        "schedule": {"every": "1h"},
        "target": {"group": format!("g-{name}")},
        "payload": {"n": 1},
    })
}

/// The job's id.
pub fn id(job: &Value) -> &str {
    job["id"].as_str().expect("a job id")
}
