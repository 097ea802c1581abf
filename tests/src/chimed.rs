//! A real `chimed` process on a free port, with its own store and vhost.

use std::{
    path::PathBuf,
    process::{ExitStatus, Stdio},
    time::Duration,
};

use reqwest::Method;
use tokio::process::{Child, Command};

use crate::{api::Api, binaries, wait};

/// Settings of a chimed under test.
#[derive(Debug, Clone)]
pub struct ChimedConfig {
    /// Store URL.
    pub database_url: String,
    /// Broker URL (a test vhost).
    pub amqp_url: String,
    /// Extra `CHIME_*` environment.
    pub env: Vec<(String, String)>,
    /// Write the log to its file even with `TEST_LOG` (for tests that read it).
    pub log_to_file: bool,
    /// The bootstrap admin token chimed reads from its `admin_token_file`.
    pub admin_token: String,
    /// That file (written before chimed starts, mode 0600).
    pub admin_token_file: PathBuf,
    /// Serve the API over HTTPS with these files.
    pub https: Option<HttpsFiles>,
}

/// The certificate, key and issuing CA of a chimed serving HTTPS.
#[derive(Debug, Clone)]
pub struct HttpsFiles {
    /// `CHIME_HTTP_TLS_CERT_FILE`.
    pub cert: PathBuf,
    /// `CHIME_HTTP_TLS_KEY_FILE`.
    pub key: PathBuf,
    /// The CA the harness's client trusts (and nothing else).
    pub ca: PathBuf,
}

impl HttpsFiles {
    /// A client that trusts only `ca` (PEM).
    pub fn client_trusting(ca: &std::path::Path) -> reqwest::Client {
        chime_scheduler::daemon::tls::install_crypto_provider();
        let pem = std::fs::read(ca).expect("read the CA certificate");
        let certs = reqwest::Certificate::from_pem_bundle(&pem).expect("a PEM CA certificate");
        reqwest::Client::builder()
            .tls_certs_only(certs)
            .build()
            .expect("an HTTPS client")
    }
}

impl ChimedConfig {
    /// A config for `database_url` and `amqp_url`.
    pub fn new(database_url: &str, amqp_url: &str) -> Self {
        let random: [u8; 32] = rand::random();
        let admin_token = format!(
            "chime_test_{}",
            random
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        let admin_token_file = binaries::scratch_dir("token").join("admin.token");
        write_private(&admin_token_file, &admin_token);
        Self {
            database_url: database_url.to_string(),
            amqp_url: amqp_url.to_string(),
            env: Vec::new(),
            log_to_file: false,
            admin_token,
            admin_token_file,
            https: None,
        }
    }

    /// Serves the API over HTTPS with `cert` and `key` (the harness's client trusts only
    /// `ca`, and reaches chimed at `https://127.0.0.1:PORT`: the certificate must name
    /// that address).
    pub fn https(
        mut self,
        cert: &std::path::Path,
        key: &std::path::Path,
        ca: &std::path::Path,
    ) -> Self {
        self.https = Some(HttpsFiles {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            ca: ca.to_path_buf(),
        });
        self
    }

    /// Writes the log to its file even with `TEST_LOG`, for a test that reads it.
    pub fn log_to_file(mut self) -> Self {
        self.log_to_file = true;
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }
}

/// A running chimed.
pub struct Chimed {
    child: Child,
    config: ChimedConfig,
    port: u16,
    log: PathBuf,
    /// Its API.
    pub api: Api,
}

impl Chimed {
    /// Starts chimed and waits until `/readyz` says ready.
    pub async fn start(config: ChimedConfig) -> Self {
        let port = free_port();
        Self::start_on(config, port).await
    }

    /// Starts chimed without waiting for it to be ready (for a test of a chimed that
    /// cannot become ready, e.g. with no broker to reach).
    pub async fn start_unready(config: ChimedConfig) -> Self {
        let port = free_port();
        let log = binaries::scratch_dir("chimed").join("chimed.log");
        let mut command = Self::command(&config, port);
        log_to_file(&mut command, &log);
        let child = command.spawn().expect("start chimed");
        let api = api_of(&config, port).with_token(Some(&config.admin_token));
        Self {
            child,
            config,
            port,
            log,
            api,
        }
    }

    async fn start_on(config: ChimedConfig, port: u16) -> Self {
        let log = binaries::scratch_dir("chimed").join("chimed.log");
        let mut command = Self::command(&config, port);
        if config.log_to_file {
            log_to_file(&mut command, &log);
        } else {
            attach_output(&mut command, &log);
        }
        let child = command.spawn().expect("start chimed");
        let api = api_of(&config, port).with_token(Some(&config.admin_token));
        let chimed = Self {
            child,
            config,
            port,
            log,
            api,
        };
        chimed.wait_ready().await;
        chimed
    }

    async fn wait_ready(&self) {
        let api = self.api.clone();
        let client = client_of(&self.config);
        let log = self.log.clone();
        wait::until(
            &format!(
                "chimed on port {} to be ready (log: {})",
                self.port,
                log.display()
            ),
            Duration::from_secs(30),
            || {
                let api = api.clone();
                let client = client.clone();
                async move {
                    let response = client
                        .request(Method::GET, format!("{}/readyz", api.base()))
                        .send()
                        .await
                        .ok()?;
                    response.status().is_success().then_some(())
                }
            },
        )
        .await;
    }

    /// The config it runs with.
    pub fn config(&self) -> &ChimedConfig {
        &self.config
    }

    /// Where its log goes.
    pub fn log_path(&self) -> &PathBuf {
        &self.log
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM and waits for the exit.
    pub async fn stop(mut self) -> ExitStatus {
        signal(&self.child, "TERM");
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("chimed exits within 30 s of SIGTERM")
            .expect("wait for chimed")
    }

    /// Kills it with SIGKILL, as a crash would.
    pub async fn kill(mut self) {
        signal(&self.child, "KILL");
        let _ = self.child.wait().await;
    }

    /// Sends `sig` (`STOP`, `CONT`, ...) without waiting.
    pub fn signal(&self, sig: &str) {
        signal(&self.child, sig);
    }

    /// Its node id, as it reports it.
    pub async fn node_id(&self) -> String {
        let (status, body) = self.api.call(Method::GET, "/v1/cluster", None).await;
        assert!(status.is_success(), "GET /v1/cluster: {status} {body}");
        body["this_node"].as_str().expect("this_node").to_string()
    }

    /// Runs chimed expecting it to refuse to start: returns its exit status and log.
    pub async fn start_expecting_exit(config: ChimedConfig) -> (ExitStatus, String) {
        let port = free_port();
        let log = binaries::scratch_dir("chimed").join("refused.log");
        let mut command = Self::command(&config, port);
        attach_output(&mut command, &log);
        let mut child = command.spawn().expect("start chimed");
        let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
            .await
            .expect("chimed exits by itself within 30 s")
            .expect("wait for chimed");
        (status, std::fs::read_to_string(&log).unwrap_or_default())
    }

    fn command(config: &ChimedConfig, port: u16) -> Command {
        let mut command = Command::new(binaries::binary("chimed"));
        command
            .env("CHIME_DATABASE_URL", &config.database_url)
            .env("CHIME_AMQP_URL", &config.amqp_url)
            .env("CHIME_HTTP_ADDR", format!("127.0.0.1:{port}"))
            .env("CHIME_LOG", "info,chime_scheduler=debug")
            .env("CHIME_ADMIN_TOKEN_FILE", &config.admin_token_file)
            .envs(config.env.iter().map(|(k, v)| (k, v)))
            .kill_on_drop(true);
        if let Some(https) = &config.https {
            command
                .env("CHIME_HTTP_TLS_CERT_FILE", &https.cert)
                .env("CHIME_HTTP_TLS_KEY_FILE", &https.key);
        }
        command
    }

    /// The bootstrap admin token it accepts.
    pub fn token(&self) -> &str {
        &self.config.admin_token
    }

    /// Starts a new chimed with the same config and port.
    pub async fn restart_from(config: ChimedConfig, port: u16) -> Self {
        Self::start_on(config, port).await
    }

    /// Its HTTP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}

/// The API client of a chimed started with `config` on `port`: `https://` with a client
/// trusting the test CA when it serves HTTPS.
fn api_of(config: &ChimedConfig, port: u16) -> Api {
    let scheme = if config.https.is_some() {
        "https"
    } else {
        "http"
    };
    Api::with_client(format!("{scheme}://127.0.0.1:{port}"), client_of(config))
}

/// An HTTP client for a chimed started with `config`.
fn client_of(config: &ChimedConfig) -> reqwest::Client {
    match &config.https {
        Some(https) => HttpsFiles::client_trusting(&https.ca),
        None => {
            chime_scheduler::daemon::tls::install_crypto_provider();
            reqwest::Client::new()
        }
    }
}

/// Sends `signal` (`TERM`, `KILL`, `STOP`, `CONT`) to a child process.
pub fn signal(child: &Child, signal: &str) {
    if let Some(pid) = child.id() {
        let _ = std::process::Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status();
    }
}

/// Sends the process's output to `log`, or to the test's own output with `TEST_LOG`.
pub fn attach_output(command: &mut Command, log: &PathBuf) {
    if std::env::var_os("TEST_LOG").is_some() {
        command.stdout(Stdio::inherit()).stderr(Stdio::inherit());
    } else {
        log_to_file(command, log);
    }
}

/// Sends the process's output to `log`.
fn log_to_file(command: &mut Command, log: &PathBuf) {
    let file = std::fs::File::create(log).expect("create a log file");
    let err = file.try_clone().expect("clone the log file handle");
    command.stdout(file).stderr(err);
}

/// A TCP port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Writes `contents` to `path`, readable by its owner only.
pub fn write_private(path: &std::path::Path, contents: &str) {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .expect("create a private file");
    std::io::Write::write_all(&mut file, contents.as_bytes()).expect("write a private file");
}
