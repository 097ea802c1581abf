//! `amqps://` against one private RabbitMQ node (booting one takes seconds, so the
//! scenarios share it and run in order): the consumer library's connect (which chimed's
//! broker connect calls too) with a CA bundle and a client certificate; a wrong CA, the
//! system roots and a wrong host name refused with errors naming the cause; a client
//! without a certificate refused; EXTERNAL authentication; and the chimed binary, with
//! its store on a private PostgreSQL over TLS (verify-full), firing a job to a consumer,
//! both over amqps.

use std::{path::Path, time::Duration};

use chime_consumer::connect::connect;
use chime_testkit::certs::PemPair;
use chime_tests::{
    Chimed, JobSpec, TestConsumer, api::in_state, chimed::ChimedConfig,
    private_postgres::PrivatePostgres, private_rabbitmq::PrivateRabbit, wait,
};
use lapin::{
    BasicProperties, ConnectionProperties,
    options::{BasicGetOptions, BasicPublishOptions, QueueDeclareOptions},
    types::FieldTable,
};
use serde_json::json;

use crate::Certs;

struct Node {
    certs: Certs,
    client: PemPair,
    rabbit: PrivateRabbit,
}

impl Node {
    fn start() -> Self {
        let certs = Certs::generate();
        let server = certs.ca.server("rabbit", &["localhost", "127.0.0.1"]);
        let client = certs.ca.client("client", "chime");
        let rabbit = PrivateRabbit::start(&certs.ca.ca_cert(), &server);
        Self {
            certs,
            client,
            rabbit,
        }
    }

    /// `amqps://guest:guest@HOST:PORT/%2f?` + `query`.
    fn url(&self, host: &str, query: &str) -> String {
        format!(
            "amqps://guest:guest@{host}:{}/%2f?{query}",
            self.rabbit.tls_port
        )
    }

    /// The query naming `ca` and, if given, a client certificate.
    fn query(ca: &Path, client: Option<&PemPair>) -> String {
        let mut query = format!("cacertfile={}", ca.display());
        if let Some(client) = client {
            query.push_str(&format!(
                "&certfile={}&keyfile={}",
                client.cert.display(),
                client.key.display()
            ));
        }
        query
    }

    fn good_query(&self) -> String {
        Self::query(&self.certs.ca.ca_cert(), Some(&self.client))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqps_against_a_private_tls_node() {
    let started = std::time::Instant::now();
    let node = Node::start();
    eprintln!("node booted in {:?}", started.elapsed());
    let step = std::time::Instant::now();
    round_trips_with_a_ca_bundle_and_a_client_certificate(&node).await;
    eprintln!(
        "round_trips_with_a_ca_bundle_and_a_client_certificate: {:?}",
        step.elapsed()
    );
    let step = std::time::Instant::now();
    a_wrong_ca_is_refused(&node).await;
    eprintln!("a_wrong_ca_is_refused: {:?}", step.elapsed());
    let step = std::time::Instant::now();
    system_roots_do_not_trust_a_private_ca(&node).await;
    eprintln!(
        "system_roots_do_not_trust_a_private_ca: {:?}",
        step.elapsed()
    );
    let step = std::time::Instant::now();
    a_wrong_host_name_is_refused(&node).await;
    eprintln!("a_wrong_host_name_is_refused: {:?}", step.elapsed());
    let step = std::time::Instant::now();
    server_name_indication_names_the_host_to_verify(&node).await;
    eprintln!(
        "server_name_indication_names_the_host_to_verify: {:?}",
        step.elapsed()
    );
    let step = std::time::Instant::now();
    a_client_without_a_certificate_is_refused(&node).await;
    eprintln!(
        "a_client_without_a_certificate_is_refused: {:?}",
        step.elapsed()
    );
    let step = std::time::Instant::now();
    external_authentication_takes_the_certificate_name(&node).await;
    eprintln!(
        "external_authentication_takes_the_certificate_name: {:?}",
        step.elapsed()
    );
    let step = std::time::Instant::now();
    chimed_fires_a_job_to_a_consumer_over_amqps(&node).await;
    eprintln!(
        "chimed_fires_a_job_to_a_consumer_over_amqps: {:?}",
        step.elapsed()
    );
}

async fn round_trips_with_a_ca_bundle_and_a_client_certificate(node: &Node) {
    for host in ["localhost", "127.0.0.1"] {
        let url = node.url(host, &node.good_query());
        let connection = connect(&url, ConnectionProperties::default())
            .await
            .unwrap_or_else(|e| panic!("amqps to {host} with the right CA: {e}"));
        let channel = connection.create_channel().await.unwrap();
        let queue = format!("tls-probe-{}", uuid::Uuid::now_v7().simple());
        channel
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions {
                    auto_delete: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap();
        channel
            .basic_publish(
                "".into(),
                queue.as_str().into(),
                BasicPublishOptions::default(),
                b"over tls",
                BasicProperties::default(),
            )
            .await
            .unwrap();
        let got = wait::until("the message back", Duration::from_secs(10), || async {
            channel
                .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
                .await
                .unwrap()
        })
        .await;
        assert_eq!(got.delivery.data, b"over tls");
        connection.close(200, "done".into()).await.unwrap();
    }
}

async fn a_wrong_ca_is_refused(node: &Node) {
    let query = Node::query(&node.certs.other_ca.ca_cert(), Some(&node.client));
    let err = connect(
        &node.url("localhost", &query),
        ConnectionProperties::default(),
    )
    .await
    .expect_err("a server signed by a CA the client does not trust")
    .to_string();
    eprintln!("wrong CA: {err}");
    assert!(
        err.contains("tls handshake with localhost") && err.contains("UnknownIssuer"),
        "{err}"
    );
    assert!(!err.contains("guest:guest"), "{err}");
}

async fn system_roots_do_not_trust_a_private_ca(node: &Node) {
    // No cacertfile: the system's roots, which do not hold the test CA.
    let query = format!(
        "certfile={}&keyfile={}",
        node.client.cert.display(),
        node.client.key.display()
    );
    let err = connect(
        &node.url("localhost", &query),
        ConnectionProperties::default(),
    )
    .await
    .expect_err("system roots must not trust the test CA")
    .to_string();
    assert!(err.contains("UnknownIssuer"), "{err}");
}

async fn a_wrong_host_name_is_refused(node: &Node) {
    // 127.0.0.2 reaches the same listener, but the certificate is for localhost and
    // 127.0.0.1 only.
    let err = connect(
        &node.url("127.0.0.2", &node.good_query()),
        ConnectionProperties::default(),
    )
    .await
    .expect_err("a certificate for another name")
    .to_string();
    eprintln!("wrong name: {err}");
    assert!(
        err.contains("verifying the name 127.0.0.2") && err.contains("not valid for name"),
        "{err}"
    );
}

async fn server_name_indication_names_the_host_to_verify(node: &Node) {
    let query = format!("{}&server_name_indication=localhost", node.good_query());
    let connection = connect(
        &node.url("127.0.0.2", &query),
        ConnectionProperties::default(),
    )
    .await
    .expect("the certificate is valid for the name given");
    assert!(connection.status().connected());
    connection.close(200, "done".into()).await.unwrap();
}

async fn a_client_without_a_certificate_is_refused(node: &Node) {
    let query = Node::query(&node.certs.ca.ca_cert(), None);
    let result = tokio::time::timeout(
        Duration::from_secs(15),
        connect(
            &node.url("localhost", &query),
            ConnectionProperties::default(),
        ),
    )
    .await
    .expect("refused promptly, not hanging");
    let err = result
        .expect_err("the node demands a client certificate")
        .to_string();
    eprintln!("without a client certificate: {err}");
    assert!(!err.is_empty());
}

async fn external_authentication_takes_the_certificate_name(node: &Node) {
    let user = "chime-ext";
    node.rabbit
        .ctl_ok(&["add_user", user, &uuid::Uuid::now_v7().to_string()]);
    node.rabbit
        .ctl_ok(&["set_permissions", "-p", "/", user, ".*", ".*", ".*"]);
    let client = node.certs.ca.client("ext", user);
    let query = format!(
        "{}&auth_mechanism=external",
        Node::query(&node.certs.ca.ca_cert(), Some(&client))
    );
    // No user name or password in the URL: the certificate is the credential.
    let url = format!("amqps://localhost:{}/%2f?{query}", node.rabbit.tls_port);
    let connection = connect(
        &url,
        ConnectionProperties::default().with_connection_name("ext-probe".into()),
    )
    .await
    .expect("EXTERNAL with a certificate for an existing user");
    let listed = node
        .rabbit
        .ctl_ok(&["-q", "list_connections", "user", "client_properties"]);
    assert!(
        listed
            .lines()
            .any(|line| line.starts_with(user) && line.contains("ext-probe")),
        "{listed}"
    );
    connection.close(200, "done".into()).await.unwrap();

    // A certificate whose name is no user is refused at authentication.
    let stranger = node.certs.ca.client("stranger", "nobody-here");
    let query = format!(
        "{}&auth_mechanism=external",
        Node::query(&node.certs.ca.ca_cert(), Some(&stranger))
    );
    let refused = connect(
        &format!("amqps://localhost:{}/%2f?{query}", node.rabbit.tls_port),
        ConnectionProperties::default(),
    )
    .await;
    assert!(refused.is_err(), "EXTERNAL for an unknown user must fail");
}

async fn chimed_fires_a_job_to_a_consumer_over_amqps(node: &Node) {
    let url = node.url("localhost", &node.good_query());
    // The store too over TLS: a private PostgreSQL, verify-full against the test CA.
    let pg_server = node.certs.ca.server("pg", &["127.0.0.1"]);
    let pg = PrivatePostgres::start(&node.certs.ca.ca_cert(), &pg_server);
    let database_url = pg.url(
        "postgres",
        "postgres",
        "127.0.0.1",
        &format!(
            "sslmode=verify-full&sslrootcert={}",
            node.certs.ca.ca_cert().display()
        ),
    );
    let chimed = Chimed::start(ChimedConfig::new(&database_url, &url)).await;
    let consumer = TestConsumer::start(&url, "tls-workers", "tls-w1", &[]).await;
    let job = chimed
        .api
        .create_job(
            JobSpec::new("tls", "tick")
                .cron("* * * * * *")
                .group("tls-workers")
                .payload(json!({"over": "amqps"}))
                .build(),
        )
        .await;
    let id = job["id"].as_str().unwrap().to_string();
    let runs = wait::until(
        "a run succeeded over amqps",
        Duration::from_secs(30),
        || async {
            let runs = chimed.api.runs(&id).await;
            (!in_state(&runs, "succeeded").is_empty()).then_some(runs)
        },
    )
    .await;
    let run = in_state(&runs, "succeeded")[0];
    assert_eq!(run["consumer"], "tls-w1");
    assert_eq!(run["output"]["echo"], json!({"over": "amqps"}));
    assert!(!consumer.events_of("started").is_empty());
}
