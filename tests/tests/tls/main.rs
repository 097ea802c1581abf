//! TLS against real servers: a private RabbitMQ node with a TLS listener and a private
//! PostgreSQL with `ssl = on`, each started by the test on free ports with certificates
//! from the test CA ([`chime_testkit::certs::TestCa`]) and removed afterwards. Covers
//! success, a wrong CA, a wrong host name and client certificates, through the code
//! chimed and the consumer library really connect with. Each test fails loudly when
//! RabbitMQ or PostgreSQL's `initdb` is not installed.

mod amqps;
mod postgres;

use chime_testkit::certs::TestCa;

/// A fresh CA (and its directory) for one test, plus a second CA nothing trusts.
pub struct Certs {
    pub ca: TestCa,
    pub other_ca: TestCa,
    pub dir: std::path::PathBuf,
}

impl Certs {
    pub fn generate() -> Self {
        let dir = std::env::temp_dir().join(format!("chime-tls-certs-{}", uuid::Uuid::now_v7()));
        Self {
            ca: TestCa::new(dir.join("ca"), "ca"),
            other_ca: TestCa::new(dir.join("other"), "other"),
            dir,
        }
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
