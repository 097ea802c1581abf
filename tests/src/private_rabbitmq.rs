//! A private RabbitMQ node with a TLS listener, for the TLS tests: its own node name,
//! free ports (TLS listener and Erlang distribution; no plaintext listener) and a data
//! directory under the system temp directory, started from the installed RabbitMQ's
//! scripts (`/usr/lib/rabbitmq/bin`, as the current user, like
//! `tests/tools/bench-broker.sh`) and stopped and deleted on drop. The machine's shared
//! broker is never touched.
//!
//! The listener demands a client certificate signed by the test CA
//! (`verify_peer` + `fail_if_no_peer_cert`), and the `rabbitmq_auth_mechanism_ssl`
//! plugin offers EXTERNAL authentication (user name = the certificate's common name).

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    time::{Duration, Instant},
};

use chime_testkit::certs::PemPair;

use crate::chimed::free_port;

const BIN: &str = "/usr/lib/rabbitmq/bin";

/// A running private node; stopped and deleted on drop.
#[derive(Debug)]
pub struct PrivateRabbit {
    node: String,
    dir: PathBuf,
    /// The TLS listener's port.
    pub tls_port: u16,
}

impl PrivateRabbit {
    /// Starts a node whose TLS listener presents `server` and trusts clients signed by
    /// the CA in `ca_file`; waits until it has booted. Panics (loudly) when RabbitMQ is
    /// not installed or the node does not boot.
    pub fn start(ca_file: &Path, server: &PemPair) -> Self {
        let server_script = Path::new(BIN).join("rabbitmq-server");
        assert!(
            server_script.exists(),
            "RabbitMQ is not installed ({} is missing): the TLS tests need it \
             (deploy/local/rabbitmq.sh installs it)",
            server_script.display()
        );
        let tls_port = free_port();
        let dist_port = free_port();
        let id = uuid::Uuid::now_v7().simple().to_string();
        let node = format!("chimetls{}@localhost", &id[id.len() - 12..]);
        let dir = std::env::temp_dir().join(format!("chime-tls-rabbit-{id}"));
        std::fs::create_dir_all(dir.join("mnesia")).expect("create the node's directory");
        std::fs::create_dir_all(dir.join("log")).expect("create the node's log directory");
        std::fs::write(
            dir.join("enabled_plugins"),
            "[rabbitmq_auth_mechanism_ssl].\n",
        )
        .expect("write enabled_plugins");
        let conf = format!(
            "listeners.tcp = none\n\
             listeners.ssl.default = {tls_port}\n\
             ssl_options.cacertfile = {ca}\n\
             ssl_options.certfile = {cert}\n\
             ssl_options.keyfile = {key}\n\
             ssl_options.verify = verify_peer\n\
             ssl_options.fail_if_no_peer_cert = true\n\
             auth_mechanisms.1 = PLAIN\n\
             auth_mechanisms.2 = AMQPLAIN\n\
             auth_mechanisms.3 = EXTERNAL\n\
             ssl_cert_login_from = common_name\n",
            ca = ca_file.display(),
            cert = server.cert.display(),
            key = server.key.display(),
        );
        std::fs::write(dir.join("rabbitmq.conf"), conf).expect("write rabbitmq.conf");
        let rabbit = Self {
            node,
            dir,
            tls_port,
        };
        let status = Command::new(&server_script)
            .arg("-detached")
            .env("RABBITMQ_NODENAME", &rabbit.node)
            .env("RABBITMQ_DIST_PORT", dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", rabbit.dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", rabbit.dir.join("log"))
            .env("RABBITMQ_CONFIG_FILE", rabbit.dir.join("rabbitmq.conf"))
            .env(
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                rabbit.dir.join("enabled_plugins"),
            )
            .env("RABBITMQ_PID_FILE", rabbit.dir.join("node.pid"))
            .status()
            .expect("run rabbitmq-server");
        assert!(
            status.success(),
            "rabbitmq-server -detached failed: {status}"
        );
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let out = rabbit.ctl(&["-q", "await_startup", "--timeout", "30"]);
            if out.status.success() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the private RabbitMQ node did not boot within 120 s; see {}",
                rabbit.dir.join("log").display()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        rabbit
    }

    /// Runs `rabbitmqctl` against this node.
    pub fn ctl(&self, args: &[&str]) -> Output {
        Command::new(Path::new(BIN).join("rabbitmqctl"))
            .arg("-n")
            .arg(&self.node)
            .args(args)
            .output()
            .expect("run rabbitmqctl")
    }

    /// Runs `rabbitmqctl` and panics with its output when it fails.
    pub fn ctl_ok(&self, args: &[&str]) -> String {
        let out = self.ctl(args);
        assert!(
            out.status.success(),
            "rabbitmqctl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for PrivateRabbit {
    fn drop(&mut self) {
        let _ = self.ctl(&["-q", "stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
