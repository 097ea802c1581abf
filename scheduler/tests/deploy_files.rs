//! The shipped deployments (`deploy/compose/`, `deploy/k8s/`) against `chimed` itself:
//! every `CHIME_*` variable they give `chimed` is one of its settings (or `chimectl`'s),
//! every hop is TLS (amqps://, sslmode=verify-full, HTTPS on the API), ports are
//! published on loopback only, and the Compose stack's `make-certs.sh`, run for real
//! (it needs `openssl`), makes certificates that verify for the right names and files
//! that `chimed`'s own configuration loader and HTTPS stack accept. No YAML parser is
//! assumed: the files are read line by line, which their regular layout allows.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
};

use chime_scheduler::{
    config::{Layers, SETTINGS},
    daemon::tls::ServerTls,
};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(relative: &str) -> String {
    let path = root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `chimectl`'s own variables, as its CLI declares them.
fn chimectl_env() -> BTreeSet<String> {
    let cli = read("scheduler/src/cli/mod.rs");
    ["CHIME_SERVER", "CHIME_CA_FILE", "CHIME_TOKEN_FILE"]
        .into_iter()
        .inspect(|name| {
            assert!(
                cli.contains(&format!("env = \"{name}\"")),
                "chimectl no longer reads {name}"
            )
        })
        .map(String::from)
        .collect()
}

fn is_setting(env: &str) -> bool {
    SETTINGS.iter().any(|s| s.env == env)
}

/// The lines of each Compose service (`  name:` under `services:` up to the next one).
fn compose_services(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut services = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut in_services = false;
    for line in text.lines() {
        if !line.starts_with(' ') && !line.trim().is_empty() && !line.starts_with('#') {
            in_services = line.trim_end() == "services:";
            current = None;
            continue;
        }
        if !in_services {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        if indent == 2 && line.trim_end().contains(':') && !line.trim().starts_with('#') {
            let name = line.trim().split(':').next().unwrap().to_string();
            services.insert(name.clone(), Vec::new());
            current = Some(name);
        } else if let Some(name) = &current {
            services.get_mut(name).unwrap().push(line.to_string());
        }
    }
    services
}

/// `CHIME_*: value` entries of a block of YAML lines.
fn env_entries(lines: &[String]) -> BTreeMap<String, String> {
    lines
        .iter()
        .filter_map(|line| {
            let (key, value) = line.trim().split_once(':')?;
            key.starts_with("CHIME_")
                .then(|| (key.to_string(), value.trim().to_string()))
        })
        .collect()
}

/// Non-comment lines of `text`.
fn code_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter(|l| !l.trim_start().starts_with('#'))
}

#[test]
fn compose_gives_chimed_only_real_settings_and_tls_everywhere() {
    let text = read("deploy/compose/docker-compose.yml");
    let services = compose_services(&text);
    let chimectl = chimectl_env();
    let nodes: Vec<_> = services
        .keys()
        .filter(|s| s.starts_with("chimed-"))
        .collect();
    assert_eq!(nodes.len(), 3, "chimed services: {nodes:?}");
    for name in nodes {
        for (env, _) in env_entries(&services[name]) {
            assert!(
                is_setting(&env) || chimectl.contains(&env),
                "{name} sets {env}, which is neither a chimed setting nor chimectl's"
            );
        }
    }
    // chimed-2 and -3 inherit chimed-1's environment; check its content there.
    let env = env_entries(&services["chimed-1"]);
    for required in [
        "CHIME_AMQP_URL_FILE",
        "CHIME_DATABASE_URL_FILE",
        "CHIME_HTTP_TLS_CERT_FILE",
        "CHIME_HTTP_TLS_KEY_FILE",
        "CHIME_ADMIN_TOKEN_FILE",
        "CHIME_CA_FILE",
    ] {
        assert!(
            env.contains_key(required),
            "chimed-1 does not set {required}"
        );
    }
    for absent in ["CHIME_AMQP_URL", "CHIME_DATABASE_URL"] {
        assert!(
            !env.contains_key(absent),
            "chimed-1 sets {absent}: the password would be in the environment"
        );
    }
    assert!(env["CHIME_SERVER"].starts_with("https://"), "{env:?}");

    let consumer = read("consumer-lib/examples/demo_consumer.rs");
    for (env, _) in env_entries(&services["example-consumer"]) {
        assert!(
            consumer.contains(&format!("\"{env}\"")),
            "example-consumer sets {env}, which demo_consumer does not read"
        );
    }
    assert!(
        services["example-consumer"]
            .iter()
            .any(|l| l.contains("/run/chime/amqp-url")),
        "the consumer does not read the amqps URL file"
    );

    for line in code_lines(&text) {
        assert!(
            !line.contains("amqp://"),
            "plaintext AMQP in compose: {line}"
        );
        assert!(!line.contains("http://"), "plain HTTP in compose: {line}");
        assert!(
            !line.contains("5672"),
            "plaintext AMQP port in compose: {line}"
        );
        let item = line.trim().trim_start_matches("- ").trim_matches('"');
        if item.matches(':').count() >= 2 && item.chars().next().is_some_and(|c| c.is_ascii_digit())
        {
            assert!(
                item.starts_with("127.0.0.1:"),
                "a port published beyond loopback: {line}"
            );
        }
    }
    let postgres = services["postgres"].join("\n");
    assert!(postgres.contains("ssl=on"), "PostgreSQL without ssl=on");
    let hba = read("deploy/compose/pg_hba.conf");
    assert!(
        code_lines(&hba).all(|l| !l.trim_start().starts_with("host ")),
        "pg_hba.conf accepts plaintext TCP"
    );
    let rabbit = read("deploy/compose/rabbitmq-tls.conf");
    assert!(
        rabbit.contains("listeners.tcp = none"),
        "plaintext AMQP listener"
    );
    assert!(rabbit.contains("listeners.ssl.default = 5671"));
}

/// The chime.toml in the ConfigMap, the Deployment's env and the Secret's URLs.
struct K8s {
    toml: String,
    env: BTreeMap<String, String>,
    secret: BTreeMap<String, String>,
}

fn k8s() -> (String, K8s) {
    let text = read("deploy/k8s/chimed.yaml");
    let toml = text
        .split("chime.toml: |\n")
        .nth(1)
        .expect("a chime.toml in the ConfigMap")
        .split("\n---")
        .next()
        .unwrap()
        .lines()
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    let mut env = BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if let Some(name) = line.trim().strip_prefix("- name: CHIME_") {
            let value = lines[i + 1]
                .trim()
                .strip_prefix("value: ")
                .unwrap_or("")
                .to_string();
            env.insert(format!("CHIME_{name}"), value);
        }
    }
    let secret = text
        .split("stringData:\n")
        .nth(1)
        .expect("the chimed-secrets Secret")
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.trim().split_once(": "))
        .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
        .collect();
    (text.clone(), K8s { toml, env, secret })
}

#[test]
fn kubernetes_gives_chimed_only_real_settings_and_tls_everywhere() {
    let (text, k) = k8s();
    for env in k.env.keys() {
        assert!(
            is_setting(env),
            "the Deployment sets {env}, not a chimed setting"
        );
    }
    let table: toml::Table = k.toml.parse().expect("chime.toml parses");
    for key in table.keys() {
        assert!(
            SETTINGS.iter().any(|s| s.key == key),
            "chime.toml sets {key}, not a chimed setting"
        );
    }
    assert!(table.contains_key("http_tls_cert_file") && table.contains_key("http_tls_key_file"));
    assert!(k.env["CHIME_AMQP_URL_FILE"].ends_with("/amqp-url"));
    assert!(k.env["CHIME_DATABASE_URL_FILE"].ends_with("/database-url"));
    assert!(
        !text.contains("envFrom"),
        "URLs must come from files, not env"
    );
    assert!(
        k.secret["amqp-url"].starts_with("amqps://"),
        "{:?}",
        k.secret
    );
    assert!(k.secret["amqp-url"].contains("cacertfile=/etc/chime/ca/ca.crt"));
    assert!(
        k.secret["database-url"].contains("sslmode=verify-full&sslrootcert=/etc/chime/ca/ca.crt")
    );
    // Every file the settings name is under a mounted volume.
    let mounts: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("mountPath: "))
        .collect();
    let files = [
        k.env["CHIME_AMQP_URL_FILE"].as_str(),
        k.env["CHIME_DATABASE_URL_FILE"].as_str(),
        "/etc/chime/ca/ca.crt",
        table["http_tls_cert_file"].as_str().unwrap(),
        table["http_tls_key_file"].as_str().unwrap(),
        table["admin_token_file"].as_str().unwrap(),
    ];
    for file in files {
        assert!(
            mounts.iter().any(|m| file.starts_with(&format!("{m}/"))),
            "{file} is on no mounted volume ({mounts:?})"
        );
    }
    assert!(text.contains("secretName: chimed-tls"));
    assert_eq!(
        text.matches("scheme: HTTPS").count(),
        2,
        "probes must use HTTPS"
    );
    assert!(text.contains("kind: NetworkPolicy"));
    for line in code_lines(&text) {
        assert!(!line.contains("amqp://"), "plaintext AMQP in k8s: {line}");
    }
}

/// A directory under the system temp directory, removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn make_certs(out: &Path) -> String {
    let output = Command::new("sh")
        .arg(root().join("deploy/compose/make-certs.sh"))
        .arg(out)
        .output()
        .expect("run make-certs.sh with sh (it needs openssl on PATH)");
    assert!(
        output.status.success(),
        "make-certs.sh failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `openssl verify` of `cert` against `ca` for `host` (a name or an IP address).
fn verifies(ca: &Path, cert: &Path, host: &str) -> bool {
    let flag = if host.parse::<std::net::IpAddr>().is_ok() {
        "-verify_ip"
    } else {
        "-verify_hostname"
    };
    Command::new("openssl")
        .args(["verify", "-purpose", "sslserver", "-CAfile"])
        .arg(ca)
        .args([flag, host])
        .arg(cert)
        .output()
        .expect("run openssl")
        .status
        .success()
}

#[test]
fn make_certs_makes_what_chimed_and_the_servers_accept_and_keeps_it() {
    let dir = TempDir(std::env::temp_dir().join(format!(
        "chime-deploy-certs-{}",
        uuid::Uuid::now_v7().simple()
    )));
    let out = &dir.0;
    make_certs(out);
    let ca = out.join("ca/ca.crt");
    let cases = [
        (
            "rabbitmq/server.crt",
            &["rabbitmq", "localhost", "127.0.0.1"][..],
        ),
        (
            "postgres/server.crt",
            &["postgres", "localhost", "127.0.0.1"][..],
        ),
        (
            "chimed/chimed.crt",
            &["chimed-1", "chimed-2", "chimed-3", "localhost", "127.0.0.1"][..],
        ),
    ];
    for (cert, hosts) in cases {
        for host in hosts {
            assert!(verifies(&ca, &out.join(cert), host), "{cert} for {host}");
        }
    }
    // The negative case: a certificate does not verify for another service's name.
    assert!(!verifies(&ca, &out.join("rabbitmq/server.crt"), "postgres"));
    assert!(!verifies(&ca, &out.join("chimed/chimed.crt"), "rabbitmq"));

    // chimed's HTTPS stack loads the pair.
    let files = chime_scheduler::daemon::tls::TlsFiles {
        cert: out.join("chimed/chimed.crt"),
        key: out.join("chimed/chimed.key"),
    };
    chime_scheduler::daemon::tls::install_crypto_provider();
    assert!(
        ServerTls::load(files).is_ok(),
        "chimed does not load its certificate"
    );

    // chimed's configuration loader accepts Compose's environment with these files
    // (paths moved from /run/chime to the temp directory) and gets TLS everywhere.
    let chimed = out.join("chimed");
    for url in ["amqp-url", "database-url"] {
        let path = chimed.join(url);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(
            &path,
            text.replace("/run/chime/", &format!("{}/", chimed.display())),
        )
        .unwrap();
    }
    let compose = read("deploy/compose/docker-compose.yml");
    let env = env_entries(&compose_services(&compose)["chimed-1"]);
    let lookup = |name: &str| {
        env.get(name)
            .map(|v| v.replace("/run/chime/", &format!("{}/", chimed.display())))
    };
    let config = Layers::new()
        .env(lookup)
        .build()
        .unwrap_or_else(|e| panic!("chimed refuses the Compose configuration: {e}"));
    assert!(config.amqp_url.starts_with("amqps://chime:"));
    assert!(config.amqp_url.contains("server_name_indication=rabbitmq"));
    assert!(
        config
            .database_url
            .contains("sslmode=verify-full&sslrootcert=")
    );
    assert!(config.http_tls.is_some(), "the API is not HTTPS");
    assert!(config.admin_token_file.is_some());

    // A second run keeps everything: same CA, certificates, passwords and token.
    let snapshot = |out: &Path| -> BTreeMap<PathBuf, Vec<u8>> {
        ["ca", "rabbitmq", "postgres", "chimed", "consumer"]
            .iter()
            .flat_map(|d| std::fs::read_dir(out.join(d)).unwrap())
            .map(|e| e.unwrap().path())
            .filter(|p| !p.ends_with("amqp-url") && !p.ends_with("database-url"))
            .map(|p| (p.clone(), std::fs::read(&p).unwrap()))
            .collect()
    };
    let before = snapshot(out);
    let log = make_certs(out);
    assert_eq!(before, snapshot(out), "a second run changed files:\n{log}");
    assert_eq!(log.matches("is current").count(), 3, "{log}");

    // A certificate for other names is issued again, with the same CA.
    std::fs::write(out.join("postgres/server.sans"), "DNS:elsewhere\n").unwrap();
    let log = make_certs(out);
    assert!(
        log.contains("issuing") && log.contains("postgres/server.crt"),
        "{log}"
    );
    assert!(verifies(&ca, &out.join("postgres/server.crt"), "postgres"));
    assert_eq!(before[&ca], std::fs::read(&ca).unwrap(), "the CA changed");
}
