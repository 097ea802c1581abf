//! A private PostgreSQL server with TLS, for the TLS tests: `initdb` into a fresh
//! directory under the system temp directory, `ssl = on` with the test CA's server
//! certificate, listening on 127.0.0.1 and 127.0.0.2 on a free port (so a test can reach
//! it under a name its certificate does not carry), stopped and deleted on drop. The
//! machine's shared PostgreSQL is never touched.
//!
//! `pg_hba.conf` accepts only TLS connections over TCP (`hostssl`, plaintext rejected),
//! trusts every user but `certuser`, who must present a client certificate whose common
//! name is `certuser` (`clientcert=verify-full`). PostgreSQL refuses to run as root, so
//! when the tests run as root the server runs as the `postgres` user.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use chime_testkit::certs::PemPair;

use crate::chimed::free_port;

/// The user that must present a client certificate.
pub const CERT_USER: &str = "certuser";

/// A running private server; stopped and deleted on drop.
#[derive(Debug)]
pub struct PrivatePostgres {
    dir: PathBuf,
    /// The port it listens on (127.0.0.1 and 127.0.0.2).
    pub port: u16,
    run_as: Option<String>,
}

impl PrivatePostgres {
    /// Initialises and starts a server presenting `server`, verifying client
    /// certificates against the CA in `ca_file`; creates [`CERT_USER`] with a database
    /// of the same name that it owns. Panics (loudly) when `initdb`/`pg_ctl` are missing.
    pub fn start(ca_file: &Path, server: &PemPair) -> Self {
        let id = uuid::Uuid::now_v7().simple().to_string();
        let dir = std::env::temp_dir().join(format!("chime-tls-pg-{id}"));
        let data = dir.join("data");
        std::fs::create_dir_all(&dir).expect("create the server's directory");
        let run_as = running_as_root().then(|| "postgres".to_string());
        let pg = Self {
            dir,
            port: free_port(),
            run_as,
        };
        pg.chown(&pg.dir);
        pg.run(
            "initdb",
            &[
                "-D",
                path(&data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        for (from, name) in [
            (server.cert.as_path(), "server.crt"),
            (server.key.as_path(), "server.key"),
            (ca_file, "root.crt"),
        ] {
            let to = data.join(name);
            std::fs::copy(from, &to).expect("copy a certificate file");
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600))
                .expect("chmod 0600");
            pg.chown(&to);
        }
        let conf = format!(
            "\nport = {port}\nlisten_addresses = '127.0.0.1,127.0.0.2'\n\
             unix_socket_directories = '{dir}'\nfsync = off\nssl = on\n\
             ssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n\
             ssl_ca_file = 'root.crt'\n",
            port = pg.port,
            dir = pg.dir.display(),
        );
        append(&data.join("postgresql.conf"), &conf);
        let hba = format!(
            "local all all trust\n\
             hostnossl all all 0.0.0.0/0 reject\n\
             hostssl all {CERT_USER} 127.0.0.0/8 trust clientcert=verify-full\n\
             hostssl all all 127.0.0.0/8 trust\n"
        );
        std::fs::write(data.join("pg_hba.conf"), hba).expect("write pg_hba.conf");
        pg.chown(&data.join("pg_hba.conf"));
        let log = pg.dir.join("postgres.log");
        pg.run(
            "pg_ctl",
            &[
                "-D",
                path(&data),
                "-l",
                path(&log),
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
        pg.psql(&format!("CREATE ROLE {CERT_USER} LOGIN"));
        pg.psql(&format!("CREATE DATABASE {CERT_USER} OWNER {CERT_USER}"));
        pg
    }

    /// A URL for `user` on database `db` at `host` (an address it listens on) with the
    /// given query (TLS options).
    pub fn url(&self, user: &str, db: &str, host: &str, query: &str) -> String {
        format!("postgres://{user}@{host}:{}/{db}?{query}", self.port)
    }

    fn psql(&self, sql: &str) {
        self.run(
            "psql",
            &[
                "-h",
                path(&self.dir),
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql,
            ],
        );
    }

    fn run(&self, program: &str, args: &[&str]) {
        let mut command = match &self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--", program]);
                c
            }
            None => Command::new(program),
        };
        let out = command
            .args(args)
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {program} ({e}): the PostgreSQL TLS tests need initdb, pg_ctl \
                 and psql on PATH"
                )
            });
        assert!(
            out.status.success(),
            "{program} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn chown(&self, path: &Path) {
        if let Some(user) = &self.run_as {
            let status = Command::new("chown")
                .args(["-R", user])
                .arg(path)
                .status()
                .expect("run chown");
            assert!(status.success(), "chown {user} {} failed", path.display());
        }
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let mut command = match &self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--", "pg_ctl"]);
                c
            }
            None => Command::new("pg_ctl"),
        };
        let _ = command
            .args(["-D", path(&data), "-m", "immediate", "-w", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temp path")
}

fn append(file: &Path, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(file)
        .expect("open postgresql.conf");
    f.write_all(text.as_bytes())
        .expect("append to postgresql.conf");
}
