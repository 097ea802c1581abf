//! chimed's API over HTTPS, with certificates from a throwaway CA: chimectl with and
//! without `--ca-file`, plain HTTP refused, stalled handshakes timed out, certificate
//! rotation without a restart (a broken replacement keeps the old certificate), and
//! start-up errors for settings and files that do not make a pair.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    time::Duration,
};

use chime_testkit::certs::{PemPair, TestCa};
use chime_tests::{
    Chimed, TestDatabase, TestVhost, binaries,
    chimed::{ChimedConfig, HttpsFiles},
    raw_http::{RawConnection, request},
    wait,
};
use reqwest::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A chimed serving HTTPS with a certificate of CA `ca1`, and where its files live.
struct HttpsSetup {
    chimed: Chimed,
    dir: PathBuf,
    ca: TestCa,
    live: PemPair,
    _db: TestDatabase,
    _vhost: TestVhost,
}

impl HttpsSetup {
    async fn new(env: &[(&str, &str)]) -> Self {
        let dir = binaries::scratch_dir("https");
        let ca = TestCa::new(&dir, "ca1");
        // Only the address: `https://localhost:PORT` is a name the certificate lacks.
        let live = ca.server("chimed", &["127.0.0.1"]);
        let vhost = TestVhost::new();
        let db = TestDatabase::sqlite();
        let mut config = ChimedConfig::new(db.url(), &vhost.amqp_url())
            .https(&live.cert, &live.key, &ca.ca_cert())
            .log_to_file();
        for (key, value) in env {
            config = config.env(key, value);
        }
        let chimed = Chimed::start(config).await;
        Self {
            chimed,
            dir,
            ca,
            live,
            _db: db,
            _vhost: vhost,
        }
    }

    fn https_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.chimed.port())
    }

    /// GET `path` on a new connection of a client trusting only `ca`.
    async fn get_trusting(&self, ca: &Path, path: &str) -> Result<reqwest::StatusCode, String> {
        HttpsFiles::client_trusting(ca)
            .get(format!("{}{path}", self.https_url()))
            .send()
            .await
            .map(|response| response.status())
            .map_err(|error| format!("{error:?}"))
    }
}

fn chimectl(token: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(binaries::binary("chimectl"));
    command
        .env_remove("CHIME_CA_FILE")
        .env_remove("CHIME_SERVER")
        .env_remove("CHIME_TOKEN_FILE")
        .env("CHIME_TOKEN", token);
    for (key, value) in env {
        command.env(key, value);
    }
    command.args(args).output().expect("run chimectl")
}

async fn run_chimectl(token: &str, args: Vec<String>, env: Vec<(String, String)>) -> Output {
    let token = token.to_string();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        chimectl(&token, &args, &env)
    })
    .await
    .expect("chimectl ran")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chimectl_manages_jobs_over_https_with_the_ca_file_and_refuses_an_untrusted_certificate() {
    let s = HttpsSetup::new(&[]).await;
    let server = s.https_url();
    let ca = s.ca.ca_cert().display().to_string();

    let added = run_chimectl(
        s.chimed.token(),
        strings(&[
            "--server",
            &server,
            "--ca-file",
            &ca,
            "job",
            "add",
            "--app",
            "reports",
            "--name",
            "nightly",
            "--cron",
            "0 0 3 * * *",
            "--group",
            "reports",
        ]),
        vec![],
    )
    .await;
    assert!(added.status.success(), "{}", text(&added.stderr));
    // The CA from the environment works the same.
    let listed = run_chimectl(
        s.chimed.token(),
        strings(&["--server", &server, "job", "ls", "--app", "reports"]),
        vec![("CHIME_CA_FILE".into(), ca.clone())],
    )
    .await;
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    assert!(
        text(&listed.stdout).contains("nightly"),
        "{}",
        text(&listed.stdout)
    );

    // No CA: the system's roots do not know the test CA.
    let untrusted = run_chimectl(
        s.chimed.token(),
        strings(&["--server", &server, "job", "ls"]),
        vec![],
    )
    .await;
    assert_eq!(untrusted.status.code(), Some(1));
    let error = text(&untrusted.stderr);
    assert!(
        error.contains("certificate not trusted") && error.contains("use --ca-file"),
        "{error}"
    );
    // Another CA: refused the same way, never a fallback.
    let other = TestCa::new(&s.dir, "stranger");
    let wrong = run_chimectl(
        s.chimed.token(),
        strings(&[
            "--server",
            &server,
            "--ca-file",
            &other.ca_cert().display().to_string(),
            "job",
            "ls",
        ]),
        vec![],
    )
    .await;
    let error = text(&wrong.stderr);
    assert!(
        !wrong.status.success() && error.contains("certificate not trusted"),
        "{error}"
    );
    // A certificate for another name than the one in --server.
    let named = run_chimectl(
        s.chimed.token(),
        strings(&[
            "--server",
            &format!("https://localhost:{}", s.chimed.port()),
            "--ca-file",
            &ca,
            "job",
            "ls",
        ]),
        vec![],
    )
    .await;
    let error = text(&named.stderr);
    assert!(
        !named.status.success()
            && error.contains("certificate not trusted")
            && error.contains("does not name the host in --server"),
        "{error}"
    );
    // A CA file that is not there.
    let missing = run_chimectl(
        s.chimed.token(),
        strings(&[
            "--server",
            &server,
            "--ca-file",
            "/nonexistent/ca.crt",
            "job",
            "ls",
        ]),
        vec![],
    )
    .await;
    let error = text(&missing.stderr);
    assert!(
        error.contains("cannot use the CA file /nonexistent/ca.crt"),
        "{error}"
    );
    // http:// to the HTTPS port: an error with a hint, no answer.
    let plain = run_chimectl(
        s.chimed.token(),
        strings(&[
            "--server",
            &format!("http://127.0.0.1:{}", s.chimed.port()),
            "job",
            "ls",
        ]),
        vec![],
    )
    .await;
    let error = text(&plain.stderr);
    assert!(
        !plain.status.success() && error.contains("if chimed serves HTTPS, write https://"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_and_stalled_handshakes_get_no_answer_and_hold_no_slot() {
    let s = HttpsSetup::new(&[
        ("CHIME_HTTP_HEADER_TIMEOUT", "1s"),
        ("CHIME_HTTP_MAX_CONNECTIONS", "2"),
    ])
    .await;
    let port = s.chimed.port();

    // A plain HTTP request: whatever comes back is not an HTTP answer.
    let mut plain = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    plain
        .write_all(&request("GET", "/v1/jobs", None))
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), plain.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "chimed closes a plain HTTP connection");
    assert!(
        !answer.starts_with(b"HTTP/") && !text(&answer).contains("items"),
        "no HTTP answer: {:?}",
        text(&answer)
    );
    let via_reqwest = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/v1/jobs"))
        .send()
        .await;
    assert!(via_reqwest.is_err(), "{via_reqwest:?}");

    // Two connections that never finish a handshake fill both slots, and a third waits;
    // the handshake timeout (the header timeout, 1 s) frees the slots.
    let mut silent = RawConnection::open(port).await;
    let mut partial = RawConnection::open(port).await;
    partial.send(&[0x16, 0x03, 0x01, 0x00, 0x80, 0x01]).await;
    let started = std::time::Instant::now();
    let status = s.get_trusting(&s.ca.ca_cert(), "/healthz").await;
    assert_eq!(status, Ok(reqwest::StatusCode::OK));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "served once a stalled handshake timed out ({:?})",
        started.elapsed()
    );
    assert!(silent.closed_within(Duration::from_secs(5)).await);
    assert!(partial.closed_within(Duration::from_secs(5)).await);
    let metrics = s.chimed.api.metrics().await;
    let timed_out = chime_tests::api::metric(
        &metrics,
        "chime_http_connections_closed_total{reason=\"tls_handshake_timeout\"}",
    );
    assert!(timed_out >= 2.0, "{timed_out} handshakes timed out");
    let failed = chime_tests::api::metric(
        &metrics,
        "chime_http_connections_closed_total{reason=\"tls_handshake_failed\"}",
    );
    assert!(
        failed >= 2.0,
        "{failed} handshakes failed (the plain requests)"
    );
    let (status, _) = s.chimed.api.call(Method::GET, "/v1/jobs", None).await;
    assert!(status.is_success(), "the accept loop goes on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_reaches_new_connections_and_a_broken_one_keeps_the_old() {
    let s = HttpsSetup::new(&[]).await;
    let ca1 = s.ca.ca_cert();
    assert_eq!(
        s.get_trusting(&ca1, "/healthz").await,
        Ok(reqwest::StatusCode::OK)
    );
    // A keep-alive connection opened before the rotation.
    let kept = HttpsFiles::client_trusting(&ca1);
    let url = format!("{}/healthz", s.https_url());
    assert!(kept.get(&url).send().await.unwrap().status().is_success());

    // A new certificate from another CA, written over the files (key first).
    let ca2 = TestCa::new(&s.dir, "ca2");
    let next = ca2.server("next", &["127.0.0.1"]);
    std::fs::copy(&next.key, &s.live.key).unwrap();
    std::fs::copy(&next.cert, &s.live.cert).unwrap();
    let ca2 = ca2.ca_cert();
    wait::until(
        "a new connection to get the new certificate",
        Duration::from_secs(15),
        || async { s.get_trusting(&ca2, "/healthz").await.ok() },
    )
    .await;
    let old = s.get_trusting(&ca1, "/healthz").await;
    assert!(
        old.as_ref().is_err_and(|e| e.contains("UnknownIssuer")),
        "a client of the old CA no longer trusts new connections: {old:?}"
    );
    assert!(s.chimed.log().contains("https certificate reloaded"));

    // A broken replacement: rejected once, and the second certificate serves on.
    let rejected = |metrics: &str| {
        chime_tests::api::metric(
            metrics,
            "chime_http_tls_reloads_total{outcome=\"rejected\"}",
        )
    };
    let api = chime_tests::api::Api::with_client(s.https_url(), HttpsFiles::client_trusting(&ca2))
        .with_token(Some(s.chimed.token()));
    let before = rejected(&api.metrics().await);
    std::fs::write(&s.live.cert, "-----BEGIN CERTIFICATE-----\nMIIB").unwrap();
    wait::until(
        "the broken certificate to be rejected",
        Duration::from_secs(15),
        || {
            let api = api.clone();
            async move { (rejected(&api.metrics().await) > before).then_some(()) }
        },
    )
    .await;
    assert_eq!(
        s.get_trusting(&ca2, "/healthz").await,
        Ok(reqwest::StatusCode::OK),
        "the previous certificate keeps serving"
    );
    let log = s.chimed.log();
    let warnings = log
        .lines()
        .filter(|line| line.contains("https certificate files changed but do not load"))
        .count();
    assert!(warnings >= 1, "{log}");
    assert!(
        log.contains("holds no valid PEM certificate"),
        "the WARN names the reason: {log}"
    );
    assert!(
        !log.contains("PRIVATE KEY") && !log.contains("MIIB"),
        "{log}"
    );
    // Nothing changed since: no further WARN.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let again = s
        .chimed
        .log()
        .lines()
        .filter(|line| line.contains("https certificate files changed but do not load"))
        .count();
    assert_eq!(again, warnings, "one WARN per change");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_settings_and_files_that_do_not_make_a_pair_stop_chimed_at_start_up() {
    let dir = binaries::scratch_dir("https-refused");
    let ca = TestCa::new(&dir, "ca");
    let pair = ca.server("chimed", &["127.0.0.1"]);
    let other = ca.server("other", &["127.0.0.1"]);
    let db = TestDatabase::sqlite();
    let config = || ChimedConfig::new(db.url(), "amqp://guest:guest@127.0.0.1:5672/%2f");
    let secret = "c2VjcmV0LWtleS1tYXRlcmlhbA";
    let damaged = dir.join("damaged.key");
    std::fs::write(
        &damaged,
        format!("-----BEGIN PRIVATE KEY-----\n{secret}!\n-----END PRIVATE KEY-----\n"),
    )
    .unwrap();
    let cert = pair.cert.display().to_string();
    let cases = [
        (
            config().env("CHIME_HTTP_TLS_CERT_FILE", &cert),
            "CHIME_HTTP_TLS_KEY_FILE) is not set".to_string(),
        ),
        (
            config().env("CHIME_HTTP_TLS_KEY_FILE", &pair.key.display().to_string()),
            "CHIME_HTTP_TLS_CERT_FILE) is not set".to_string(),
        ),
        (
            config().https(&pair.cert, &other.key, &ca.ca_cert()),
            format!("does not belong to the certificate in {cert}"),
        ),
        (
            config().https(&pair.cert, &damaged, &ca.ca_cert()),
            "holds no valid PEM private key".to_string(),
        ),
        (
            config().https(&dir.join("missing.crt"), &pair.key, &ca.ca_cert()),
            "cannot read the HTTPS certificate file".to_string(),
        ),
    ];
    for (config, expected) in cases {
        let (status, log) = Chimed::start_expecting_exit(config).await;
        assert!(!status.success(), "{log}");
        assert!(log.contains(&expected), "expected {expected:?} in:\n{log}");
        assert!(!log.contains(secret), "{log}");
    }
}
