//! PostgreSQL over TLS against a private server: chimed's own store open path
//! (`chime_scheduler::store::open_backend`, the code `chimed` starts with) under
//! `sslmode` `require`, `verify-ca` and `verify-full`, with the right CA, a wrong CA, a
//! wrong host name, and a user that pg_hba requires a client certificate from.

use std::path::Path;

use chime_scheduler::store::{Backend, open_backend};
use chime_testkit::certs::PemPair;
use chime_tests::private_postgres::{CERT_USER, PrivatePostgres};
use sqlx::{Connection, postgres::PgConnection};

use crate::Certs;

struct Server {
    certs: Certs,
    pg: PrivatePostgres,
}

impl Server {
    fn start() -> Self {
        let certs = Certs::generate();
        // The certificate names 127.0.0.1 only; the server listens on 127.0.0.2 too.
        let server = certs.ca.server("pg", &["127.0.0.1"]);
        let pg = PrivatePostgres::start(&certs.ca.ca_cert(), &server);
        Self { certs, pg }
    }

    fn url(&self, user: &str, host: &str, query: &str) -> String {
        let db = if user == CERT_USER {
            CERT_USER
        } else {
            "postgres"
        };
        self.pg.url(user, db, host, query)
    }

    fn ca(&self) -> std::path::PathBuf {
        self.certs.ca.ca_cert()
    }
}

/// Opens chimed's store at `url` (migrations included) and says whether the session
/// is encrypted, per `pg_stat_ssl`.
async fn open_store(url: &str) -> Result<bool, String> {
    match open_backend(url, 4).await.map_err(|e| e.to_string())? {
        Backend::Postgres(_store) => {}
        Backend::Sqlite(_) => panic!("a postgres URL opened SQLite"),
    }
    let mut conn = PgConnection::connect(url)
        .await
        .map_err(|e| e.to_string())?;
    let ssl: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
    Ok(ssl)
}

fn cert_query(mode: &str, ca: &Path, client: Option<&PemPair>) -> String {
    let mut query = format!("sslmode={mode}&sslrootcert={}", ca.display());
    if let Some(client) = client {
        query.push_str(&format!(
            "&sslcert={}&sslkey={}",
            client.cert.display(),
            client.key.display()
        ));
    }
    query
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_opens_over_tls_and_verifies_the_server() {
    let s = Server::start();

    // require: encrypted, no CA needed.
    let url = s.url("postgres", "127.0.0.1", "sslmode=require");
    assert_eq!(open_store(&url).await, Ok(true), "sslmode=require");

    // verify-full with the right CA, by the name the certificate carries.
    let url = s.url(
        "postgres",
        "127.0.0.1",
        &cert_query("verify-full", &s.ca(), None),
    );
    assert_eq!(open_store(&url).await, Ok(true), "verify-full, right CA");

    // A wrong CA fails under verify-full, verify-ca, and require with a CA bundle
    // (which verifies like libpq does).
    let other = s.certs.other_ca.ca_cert();
    for mode in ["verify-full", "verify-ca", "require"] {
        let url = s.url("postgres", "127.0.0.1", &cert_query(mode, &other, None));
        let err = open_store(&url)
            .await
            .expect_err("a server certificate from another CA");
        eprintln!("{mode} with a wrong CA: {err}");
        assert!(err.contains("UnknownIssuer"), "{mode}: {err}");
    }

    // A wrong host name fails under verify-full; verify-ca checks the CA only.
    let url = s.url(
        "postgres",
        "127.0.0.2",
        &cert_query("verify-full", &s.ca(), None),
    );
    let err = open_store(&url)
        .await
        .expect_err("a certificate for another name");
    eprintln!("verify-full, wrong name: {err}");
    assert!(err.contains("not valid for name"), "{err}");
    let url = s.url(
        "postgres",
        "127.0.0.2",
        &cert_query("verify-ca", &s.ca(), None),
    );
    assert_eq!(
        open_store(&url).await,
        Ok(true),
        "verify-ca ignores the name"
    );

    // Plaintext is refused by this server (hostnossl reject): nothing falls back.
    let url = s.url("postgres", "127.0.0.1", "sslmode=disable");
    assert!(open_store(&url).await.is_err(), "plaintext must be refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_sent_and_required() {
    let s = Server::start();
    let client = s.certs.ca.client("certuser", CERT_USER);

    // Without a certificate, pg_hba refuses the user.
    let url = s.url(
        CERT_USER,
        "127.0.0.1",
        &cert_query("verify-full", &s.ca(), None),
    );
    let err = open_store(&url)
        .await
        .expect_err("certuser without a client certificate");
    eprintln!("no client certificate: {err}");
    assert!(err.contains("certificate"), "{err}");

    // A certificate for another name is refused too.
    let wrong = s.certs.ca.client("someone", "someone-else");
    let url = s.url(
        CERT_USER,
        "127.0.0.1",
        &cert_query("verify-full", &s.ca(), Some(&wrong)),
    );
    assert!(
        open_store(&url).await.is_err(),
        "a certificate for another user"
    );

    // With its certificate, chimed's store opens (and migrates) as certuser.
    let url = s.url(
        CERT_USER,
        "127.0.0.1",
        &cert_query("verify-full", &s.ca(), Some(&client)),
    );
    assert_eq!(
        open_store(&url).await,
        Ok(true),
        "certuser with its certificate"
    );
}
