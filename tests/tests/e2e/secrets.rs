//! Passwords in the store and broker URLs never reach chimed's output, on any path that
//! prints a URL (configuration errors, store and broker connection errors), and a TLS
//! URL naming a certificate file that cannot be read fails start-up, naming the file.
//! One sweep drives a chimed with real passwords and tokens through broker and database
//! outages, refused and malformed requests and chimectl failures, and finds none of the
//! secrets in anything printed or answered.

use std::time::Duration;

use chime_testkit::{
    database::POSTGRES_URL_ENV,
    vhost::{TestUser, rabbitmqctl_output},
};
use chime_tests::{
    Chimed, TestDatabase, TestVhost, api::Api, binaries, chimed::ChimedConfig, wait,
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};

use crate::support::every_second;

const DB_SECRET: &str = "hunter2-db-pw";
const MQ_SECRET: &str = "hunter2-mq-pw";

fn assert_secret_free(output: &str) {
    for secret in [DB_SECRET, MQ_SECRET] {
        assert!(
            !output.contains(secret),
            "a password reached chimed's output:\n{output}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_urls_fail_start_up_without_showing_their_password() {
    let sqlite = TestDatabase::sqlite();
    let good_amqp = "amqp://guest:guest@127.0.0.1:5672/%2f".to_string();
    let cases = [
        (
            format!("mysql://chime:{DB_SECRET}@127.0.0.1/db"),
            good_amqp.clone(),
            "invalid database_url \"mysql://chime:***@127.0.0.1/db\" (from environment CHIME_DATABASE_URL): unsupported database",
        ),
        (
            // Nothing listens on port 1: the connection error names the URL.
            format!("postgres://chime@127.0.0.1:1/db?password={DB_SECRET}"),
            good_amqp.clone(),
            "opening the store at postgres://chime@127.0.0.1:1/db?password=***",
        ),
        (
            format!(
                "postgres://chime:{DB_SECRET}@127.0.0.1:5432/db?sslmode=verify-full\
                 &sslrootcert=/nonexistent/chime-ca.pem"
            ),
            good_amqp.clone(),
            "cannot read the CA bundle (sslrootcert) /nonexistent/chime-ca.pem",
        ),
        (
            format!("postgres://chime:{DB_SECRET}@127.0.0.1:notaport/db"),
            good_amqp.clone(),
            "invalid database_url \"postgres://chime:***@127.0.0.1:notaport/db\"",
        ),
        (
            sqlite.url().to_string(),
            format!("amqps://guest:{MQ_SECRET}@127.0.0.1:5671/%2f?cacertfile=/nonexistent/ca.pem"),
            "cannot read the CA bundle /nonexistent/ca.pem",
        ),
        (
            sqlite.url().to_string(),
            format!("http://guest:{MQ_SECRET}@127.0.0.1:5672/"),
            "invalid amqp_url \"http://guest:***@127.0.0.1:5672/\" (from environment CHIME_AMQP_URL): not a RabbitMQ URL",
        ),
        (
            sqlite.url().to_string(),
            format!("amqp://guest:{MQ_SECRET}@127.0.0.1:notaport/%2f"),
            "invalid amqp_url \"amqp://guest:***@127.0.0.1:notaport/%2f\" (from environment CHIME_AMQP_URL): not a valid RabbitMQ URL: invalid port number",
        ),
    ];
    for (database_url, amqp_url, expected) in cases {
        let config = ChimedConfig::new(&database_url, &amqp_url);
        let (status, output) = Chimed::start_expecting_exit(config).await;
        assert!(!status.success(), "{database_url} {amqp_url}: {output}");
        assert!(
            output.contains(expected),
            "expected {expected:?} in:\n{output}"
        );
        assert_secret_free(&output);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_connection_errors_do_not_show_the_password() {
    let sqlite = TestDatabase::sqlite();
    // Nothing listens on port 1: chimed runs, retrying, and logs why.
    let amqp_url = format!("amqp://guest:{MQ_SECRET}@127.0.0.1:1/%2f");
    let chimed = Chimed::start_unready(ChimedConfig::new(sqlite.url(), &amqp_url)).await;
    wait::until(
        "chimed to log that it cannot reach rabbitmq",
        Duration::from_secs(30),
        || async { chimed.log().contains("cannot reach rabbitmq").then_some(()) },
    )
    .await;
    assert_secret_free(&chimed.log());
}

/// A PostgreSQL role with a password, owning a fresh database, on the shared server;
/// dropped (after its database) on drop. The server trusts local TCP connections, so the
/// password is never checked: it is there to be leaked or not.
struct PgRole {
    name: String,
    password: String,
    db: Option<TestDatabase>,
}

impl PgRole {
    async fn new() -> Self {
        let id = uuid::Uuid::now_v7().simple().to_string();
        let role = Self {
            name: format!("chime_secret_{}", &id[id.len() - 12..]),
            password: format!("pg-pw-{id}"),
            db: Some(TestDatabase::postgres().await),
        };
        role.admin(&format!(
            "CREATE ROLE {} LOGIN PASSWORD '{}'",
            role.name, role.password
        ))
        .await;
        role.admin(&format!(
            "ALTER DATABASE {} OWNER TO {}",
            role.database(),
            role.name
        ))
        .await;
        role
    }

    fn database(&self) -> String {
        let url = self.db.as_ref().expect("the database").url();
        let path = url.rsplit('/').next().expect("a database path");
        path.split('?').next().expect("a database name").to_string()
    }

    /// The URL chimed uses: this role and password, over TCP to 127.0.0.1.
    fn url(&self) -> String {
        format!(
            "postgres://{}:{}@127.0.0.1:5432/{}?sslmode=disable",
            self.name,
            self.password,
            self.database()
        )
    }

    /// Runs `sql` as the server's administrator.
    async fn admin(&self, sql: &str) {
        let admin_url = std::env::var(POSTGRES_URL_ENV)
            .unwrap_or_else(|_| chime_testkit::database::DEFAULT_POSTGRES_URL.into());
        let mut admin = PgConnection::connect(&admin_url)
            .await
            .expect("connect to the PostgreSQL server");
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let _ = admin.close().await;
    }

    /// Refuses the role's logins and ends its sessions: to chimed the database is gone.
    async fn refuse(&self) {
        self.admin(&format!("ALTER ROLE {} NOLOGIN", self.name))
            .await;
        self.admin(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{}'",
            self.name
        ))
        .await;
    }

    /// Lets the role log in again.
    async fn admit(&self) {
        self.admin(&format!("ALTER ROLE {} LOGIN", self.name)).await;
    }
}

impl Drop for PgRole {
    fn drop(&mut self) {
        drop(self.db.take());
        let name = self.name.clone();
        let admin_url = std::env::var(POSTGRES_URL_ENV)
            .unwrap_or_else(|_| chime_testkit::database::DEFAULT_POSTGRES_URL.into());
        // Drop may run inside a runtime; use a thread with its own.
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for clean-up")
                .block_on(async {
                    if let Ok(mut admin) = PgConnection::connect(&admin_url).await {
                        let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                            "DROP ROLE IF EXISTS {name}"
                        )))
                        .execute(&mut admin)
                        .await;
                    }
                });
        })
        .join();
    }
}

/// Everything a sweep saw: chimed's logs, API answers, /metrics, chimectl's output.
#[derive(Default)]
struct Seen(Vec<(String, String)>);

impl Seen {
    fn add(&mut self, what: impl Into<String>, text: impl Into<String>) {
        self.0.push((what.into(), text.into()));
    }

    /// Panics naming where a secret showed up.
    fn assert_free_of(&self, secrets: &[(&str, &str)]) {
        for (what, text) in &self.0 {
            for (name, secret) in secrets {
                assert!(!text.contains(secret), "{name} reached {what}:\n{text}");
            }
        }
    }
}

/// chimed's `/readyz` answer.
async fn readiness(api: &Api) -> Value {
    api.call(Method::GET, "/readyz", None).await.1
}

/// Waits until chimed's `/readyz` check `check` says `word`.
async fn wait_check(api: &Api, check: &str, word: &str) {
    wait::until(
        &format!("readyz {check} to be {word}"),
        Duration::from_secs(60),
        || async { (readiness(api).await["checks"][check] == word).then_some(()) },
    )
    .await;
}

async fn chimectl(
    server: &str,
    token: Option<&str>,
    token_file: Option<&std::path::Path>,
    args: &[&str],
) -> String {
    let mut command = std::process::Command::new(binaries::binary("chimectl"));
    command
        .arg("--server")
        .arg(server)
        .env_remove("CHIME_TOKEN_FILE")
        .env_remove("CHIME_TOKEN")
        .current_dir(binaries::scratch_dir("chimectl"));
    if let Some(token) = token {
        command.env("CHIME_TOKEN", token);
    }
    if let Some(file) = token_file {
        command.arg("--token-file").arg(file);
    }
    command.args(args);
    let output = tokio::task::spawn_blocking(move || command.output().expect("run chimectl"))
        .await
        .unwrap();
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs chimed with a broker URL it cannot use until its log says `expected`; returns
/// the log.
async fn unready_log(database_url: &str, amqp_url: &str, expected: &str) -> String {
    let chimed = Chimed::start_unready(ChimedConfig::new(database_url, amqp_url)).await;
    wait::until(
        &format!("chimed to log {expected:?}"),
        Duration::from_secs(30),
        || async { chimed.log().contains(expected).then_some(()) },
    )
    .await;
    let log = chimed.log();
    chimed.kill().await;
    log
}

/// One chimed with a PostgreSQL password, a RabbitMQ password, its admin token and
/// created tokens, driven through the error paths; none of those secrets appears in
/// anything it or chimectl prints or answers, and the log shows the errors happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_on_any_error_path() {
    let vhost = TestVhost::new();
    let mut mq_user = TestUser::new("chime-secret");
    mq_user.grant(&vhost, ".*", ".*", ".*");
    let pg = PgRole::new().await;
    let mq_url = mq_user.amqp_url();
    let mq_password = mq_url
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .map(|(_, password)| password.to_string())
        .expect("a password in the test user's URL");
    let config = ChimedConfig::new(&pg.url(), &mq_url)
        .log_to_file()
        .env("CHIME_LOG", "debug");
    let chimed = Chimed::start(config).await;
    let admin = chimed.api.clone();
    let base = admin.base().to_string();
    let admin_token = chimed.token().to_string();
    let mut seen = Seen::default();

    // Tokens: one revoked, one kept (a reader); their creation answers show each secret
    // once, and only there.
    let create = |name: &'static str| {
        let admin = admin.clone();
        async move {
            let body = json!({"name": name, "role": "reader", "apps": ["shop"]});
            let (status, created) = admin.call(Method::POST, "/v1/tokens", Some(&body)).await;
            assert_eq!(status, StatusCode::CREATED, "{created}");
            let secret = created["token"].as_str().expect("the secret").to_string();
            (secret, created.to_string())
        }
    };
    let (revoked, revoked_answer) = create("leaving").await;
    let (reader, reader_answer) = create("staying").await;
    assert_eq!(revoked_answer.matches(&revoked).count(), 1);
    assert_eq!(reader_answer.matches(&reader).count(), 1);
    seen.add(
        "the other token's creation answer",
        reader_answer.replace(&reader, ""),
    );
    seen.add(
        "the other token's creation answer",
        revoked_answer.replace(&revoked, ""),
    );
    let (status, body) = admin.call(Method::DELETE, "/v1/tokens/leaving", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    seen.add("DELETE /v1/tokens", body.to_string());
    let (status, body) = admin.call(Method::GET, "/v1/tokens", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.to_string().contains("staying"), "{body}");
    seen.add("GET /v1/tokens", body.to_string());

    // Refused requests: wrong, malformed, revoked and near-miss tokens, no token.
    let anonymous = Api::new(&base);
    let refusals = [
        format!("Bearer chime_{}", uuid::Uuid::now_v7().simple()),
        format!("Bearer {revoked}"),
        format!("Bearer {admin_token}x"),
        format!("Bearer x{reader}"),
        format!("Bearer {admin_token} {reader}"),
        format!("Basic {admin_token}"),
        format!("Token {reader}"),
        admin_token.clone(),
        "Bearer".to_string(),
    ];
    for header in &refusals {
        for path in ["/v1/jobs", "/v1/tokens", "/metrics"] {
            let (status, body) = anonymous
                .call_with(Method::GET, path, None, &[("authorization", header)])
                .await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{path} {body}");
            seen.add(format!("GET {path} refused"), body.to_string());
        }
    }
    let (status, body) = anonymous.call(Method::GET, "/v1/jobs", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    seen.add("GET /v1/jobs without a token", body.to_string());
    // Outside the reader's rights and apps.
    let reader_api = Api::new(&base).with_token(Some(&reader));
    for (method, path, body) in [
        (Method::GET, "/v1/tokens", None),
        (
            Method::POST,
            "/v1/jobs",
            Some(every_second("x", "g", json!({}))),
        ),
        (Method::DELETE, "/v1/tokens/staying", None),
    ] {
        let (status, answer) = reader_api.call(method, path, body.as_ref()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path} {answer}");
        seen.add(format!("{path} as a reader"), answer.to_string());
    }
    // Bad bodies.
    for raw in [
        b"{not json".to_vec(),
        b"{\"app\": 5}".to_vec(),
        b"[]".to_vec(),
        vec![0xff, 0xfe],
    ] {
        for path in ["/v1/jobs", "/v1/tokens"] {
            let (status, answer) = admin.call_raw(Method::POST, path, raw.clone()).await;
            assert!(status.is_client_error(), "{path} {status} {answer}");
            seen.add(format!("POST {path} with a bad body"), answer.to_string());
        }
    }
    let (status, answer) = admin
        .call(
            Method::POST,
            "/v1/tokens",
            Some(&json!({"name": "staying", "role": "reader", "apps": ["*"]})),
        )
        .await;
    assert!(status.is_client_error(), "{status} {answer}");
    seen.add("POST /v1/tokens with a taken name", answer.to_string());
    let job = admin
        .create_job(every_second("tick", "secret-sweep", json!({})))
        .await;
    seen.add("POST /v1/jobs", job.to_string());
    seen.add("/metrics", admin.metrics().await);

    // The broker refuses chimed's user, then lets it back in.
    rabbitmqctl_output(&["clear_permissions", "-p", vhost.name(), mq_user.name()])
        .expect("clear the user's permissions");
    assert!(
        vhost.close_connections() > 0,
        "chimed had no connection to cut"
    );
    wait_check(&admin, "broker", "unavailable").await;
    seen.add(
        "/readyz during the broker outage",
        readiness(&admin).await.to_string(),
    );
    let (status, answer) = admin
        .call(
            Method::POST,
            &format!("/v1/jobs/{}/trigger", job["id"].as_str().unwrap()),
            None,
        )
        .await;
    seen.add(
        format!("trigger during the broker outage ({status})"),
        answer.to_string(),
    );
    mq_user.grant(&vhost, ".*", ".*", ".*");
    wait_check(&admin, "broker", "ok").await;

    // The database refuses chimed's role, then lets it back in; a second chimed started
    // meanwhile fails and says why.
    pg.refuse().await;
    wait_check(&admin, "database", "unavailable").await;
    for (method, path) in [(Method::GET, "/v1/jobs"), (Method::GET, "/v1/tokens")] {
        let (status, answer) = admin.call(method, path, None).await;
        seen.add(
            format!("{path} during the database outage ({status})"),
            answer.to_string(),
        );
    }
    seen.add("/metrics during the database outage", admin.metrics().await);
    let (status, refused) =
        Chimed::start_expecting_exit(ChimedConfig::new(&pg.url(), &mq_url)).await;
    assert!(!status.success(), "{refused}");
    assert!(refused.contains("not permitted to log in"), "{refused}");
    seen.add("a chimed started while the role cannot log in", refused);
    pg.admit().await;
    wait_check(&admin, "database", "ok").await;
    seen.add("/metrics after the outages", admin.metrics().await);

    // chimectl: bad token files, a revoked token, an unreachable server.
    let scratch = binaries::scratch_dir("secret-sweep");
    let wrong_file = scratch.join("wrong.token");
    let wrong = format!("chime_{}", uuid::Uuid::now_v7().simple());
    std::fs::write(&wrong_file, format!("{wrong}\n")).unwrap();
    let revoked_file = scratch.join("revoked.token");
    std::fs::write(&revoked_file, format!("{revoked}\n")).unwrap();
    let empty_file = scratch.join("empty.token");
    std::fs::write(&empty_file, "\n").unwrap();
    let missing_file = scratch.join("missing.token");
    let runs = [
        (
            base.as_str(),
            None,
            Some(wrong_file.as_path()),
            "unauthorized",
        ),
        (
            base.as_str(),
            None,
            Some(revoked_file.as_path()),
            "unauthorized",
        ),
        (base.as_str(), None, Some(empty_file.as_path()), "is empty"),
        (
            base.as_str(),
            None,
            Some(missing_file.as_path()),
            "reading the token file",
        ),
        (base.as_str(), Some(reader.as_str()), None, "forbidden"),
        (
            "http://127.0.0.1:1",
            Some(admin_token.as_str()),
            None,
            "is chimed running at http://127.0.0.1:1",
        ),
        (
            "http://chimed.invalid:8080",
            Some(reader.as_str()),
            None,
            "chimed.invalid",
        ),
    ];
    for (server, token, file, expected) in runs {
        let args: &[&str] = if expected == "forbidden" {
            &["token", "ls"]
        } else {
            &["job", "ls"]
        };
        let output = chimectl(server, token, file, args).await;
        assert!(
            output.contains(expected),
            "expected {expected:?} in {output}"
        );
        seen.add(format!("chimectl {args:?} against {server}"), output);
    }
    let listed = chimectl(&base, Some(&admin_token), None, &["token", "ls"]).await;
    assert!(listed.contains("staying"), "{listed}");
    seen.add("chimectl token ls", listed);

    // Start-up failures and connection errors with the same passwords.
    let wrong_mq = format!("mq-wrong-{}", uuid::Uuid::now_v7().simple());
    let sqlite = TestDatabase::sqlite();
    seen.add(
        "chimed with a wrong broker password",
        unready_log(
            sqlite.url(),
            &mq_url.replace(&mq_password, &wrong_mq),
            "cannot reach rabbitmq",
        )
        .await,
    );
    seen.add(
        "chimed with an unreachable broker",
        unready_log(
            sqlite.url(),
            &mq_url.replace(":5672/", ":1/"),
            "cannot reach rabbitmq",
        )
        .await,
    );
    let (status, output) = Chimed::start_expecting_exit(ChimedConfig::new(
        &pg.url().replace(":5432/", ":1/"),
        &mq_url,
    ))
    .await;
    assert!(!status.success(), "{output}");
    assert!(output.contains("opening the store at"), "{output}");
    seen.add("chimed with an unreachable database", output);

    // The errors happened, and chimed said so.
    let log = chimed.log();
    for expected in [
        "cannot reach rabbitmq",
        "not permitted to log in",
        "connected to rabbitmq",
    ] {
        assert!(
            log.contains(expected),
            "{expected:?} is not in chimed's log:\n{log}"
        );
    }
    let log_path = chimed.log_path().clone();
    assert!(chimed.stop().await.success());
    // All of it, shut-down included.
    seen.add(
        "chimed's log",
        std::fs::read_to_string(log_path).expect("chimed's log"),
    );
    seen.assert_free_of(&[
        ("the PostgreSQL password", pg.password.as_str()),
        ("the RabbitMQ password", mq_password.as_str()),
        ("the wrong RabbitMQ password", wrong_mq.as_str()),
        ("the admin token", admin_token.as_str()),
        ("a revoked token", revoked.as_str()),
        ("a reader token", reader.as_str()),
        ("a wrong token", wrong.as_str()),
    ]);
}
