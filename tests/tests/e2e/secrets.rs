//! Passwords in the store and broker URLs never reach chimed's output, on any path that
//! prints a URL (configuration errors, store and broker connection errors), and a TLS
//! URL naming a certificate file that cannot be read fails start-up, naming the file.

use std::time::Duration;

use chime_tests::{Chimed, TestDatabase, chimed::ChimedConfig, wait};

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
