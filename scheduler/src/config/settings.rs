//! The one list of `chimed`'s settings: each key, its environment variable, its default
//! (the only place a default is written: [`super::Config::default`] and `--help` read it
//! from here) and what it does. `docs/configuration.md` lists the same table; a test
//! keeps the two in step.

/// One configuration key.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// Key in the TOML file.
    pub key: &'static str,
    /// Environment variable.
    pub env: &'static str,
    /// Default value, as text.
    pub default: &'static str,
    /// What it does.
    pub doc: &'static str,
}

/// Every setting `chimed` reads.
pub const SETTINGS: &[Setting] = &[
    Setting {
        key: "database_url",
        env: "CHIME_DATABASE_URL",
        default: "sqlite://chime.db",
        doc: "store: sqlite://FILE (single node, created if missing) or postgres://USER:PASS@HOST/DB",
    },
    Setting {
        key: "amqp_url",
        env: "CHIME_AMQP_URL",
        default: "amqp://guest:guest@127.0.0.1:5672/%2f",
        doc: "RabbitMQ connection URL: amqp://, or amqps:// for TLS (see docs/security.md)",
    },
    Setting {
        key: "database_url_file",
        env: "CHIME_DATABASE_URL_FILE",
        default: "",
        doc: "a file holding database_url (one trailing newline stripped), so the password need not be in the environment; the one of the two given at the later layer wins, both at the same layer is an error",
    },
    Setting {
        key: "amqp_url_file",
        env: "CHIME_AMQP_URL_FILE",
        default: "",
        doc: "a file holding amqp_url, as database_url_file",
    },
    Setting {
        key: "http_addr",
        env: "CHIME_HTTP_ADDR",
        default: "127.0.0.1:8080",
        doc: "address of the HTTP API, /metrics and health checks",
    },
    Setting {
        key: "http_header_timeout",
        env: "CHIME_HTTP_HEADER_TIMEOUT",
        default: "10s",
        doc: "an API connection must send a request's complete headers within this of opening, and of its previous answer (so it is also the keep-alive idle timeout), or it is closed; 1s to 10m",
    },
    Setting {
        key: "http_max_connections",
        env: "CHIME_HTTP_MAX_CONNECTIONS",
        default: "1024",
        doc: "API connections served at once; more wait in the kernel's accept queue until one closes; 1 to 65536",
    },
    Setting {
        key: "admin_token_file",
        env: "CHIME_ADMIN_TOKEN_FILE",
        default: "chime-admin.token",
        doc: "file holding the bootstrap admin API token (named bootstrap); chimed writes a new random one there, mode 0600, when the file does not exist; empty disables it",
    },
    Setting {
        key: "metrics_auth",
        env: "CHIME_METRICS_AUTH",
        default: "token",
        doc: "whether /metrics needs an API token (token: any role) or answers anyone who can reach the port (open)",
    },
    Setting {
        key: "http_tls_cert_file",
        env: "CHIME_HTTP_TLS_CERT_FILE",
        default: "",
        doc: "PEM certificate chain (the server's certificate first) to serve the API, /metrics and health checks over HTTPS on http_addr, with http_tls_key_file (both or neither; unset: plain HTTP); a changed file is picked up within seconds, without a restart",
    },
    Setting {
        key: "http_tls_key_file",
        env: "CHIME_HTTP_TLS_KEY_FILE",
        default: "",
        doc: "PEM private key (PKCS#8, PKCS#1 or SEC1) of http_tls_cert_file's certificate; reloaded with it",
    },
    Setting {
        key: "app_max_jobs",
        env: "CHIME_APP_MAX_JOBS",
        default: "1000000",
        doc: "most jobs one app may have (0: no limit); a create over it is refused 403 quota_exceeded",
    },
    Setting {
        key: "app_max_groups",
        env: "CHIME_APP_MAX_GROUPS",
        default: "100",
        doc: "most distinct consumer groups one app's jobs may target (each is a quorum queue on the broker; 0: no limit); a job for one more is refused 403 quota_exceeded",
    },
    Setting {
        key: "reply_users",
        env: "CHIME_REPLY_USERS",
        default: "",
        doc: "RabbitMQ users allowed to answer for each consumer group, as group=user entries separated by commas (a group may repeat; * stands for every group), e.g. orders=shop-app,*=ops: a reply, presence message or observer registration whose validated user_id is missing or not allowed is dead-lettered and counted; unset: any user (single-tenant)",
    },
    Setting {
        key: "payload_limit",
        env: "CHIME_PAYLOAD_LIMIT",
        default: "256KiB",
        doc: "largest job payload (JSON bytes); accepts B, KiB, MiB",
    },
    Setting {
        key: "lookahead",
        env: "CHIME_LOOKAHEAD",
        default: "30s",
        doc: "how far ahead the timer holds due jobs in memory",
    },
    Setting {
        key: "fire_ahead",
        env: "CHIME_FIRE_AHEAD",
        default: "2s",
        doc: "how far ahead of their time fires are recorded (armed), so a herd of jobs due together only has to be published at its instant; 0s records each fire when due",
    },
    Setting {
        key: "observer_copies",
        env: "CHIME_OBSERVER_COPIES",
        default: "registered",
        doc: "which tasks get a copy on chime.topics: registered (only those an observer's registered pattern matches) or all (every task, for observers that do not register)",
    },
    Setting {
        key: "misfire_grace",
        env: "CHIME_MISFIRE_GRACE",
        default: "5s",
        doc: "a fire later than this counts as missed and follows the job's misfire policy",
    },
    Setting {
        key: "republish_after",
        env: "CHIME_REPUBLISH_AFTER",
        default: "10s",
        doc: "publish a recorded run again when the broker has not confirmed it after this long",
    },
    // Short enough to keep the failover gap within 3 s (leases expire after 2 s, and a
    // renew interval may pass before the takeover).
    Setting {
        key: "takeover_ack_wait",
        env: "CHIME_TAKEOVER_ACK_WAIT",
        default: "500ms",
        doc: "how long a takeover (or start) pass waits for acks of the previous owner's past-due unmarked runs before publishing them again; 0s publishes at once (0s – 2s)",
    },
    Setting {
        key: "reconcile_interval",
        env: "CHIME_RECONCILE_INTERVAL",
        default: "1s",
        doc: "how often the reconciler looks for overdue runs (ack and run timeouts, retries due, dead letters to publish)",
    },
    Setting {
        key: "run_retention",
        env: "CHIME_RUN_RETENTION",
        default: "7d",
        doc: "finished runs (succeeded, or dead with the dead letter published) older than this are deleted in small batches; 0s keeps them forever, otherwise at least 1h",
    },
    Setting {
        key: "consumer_retention",
        env: "CHIME_CONSUMER_RETENTION",
        default: "24h",
        doc: "consumer instances not heard from for this long are deleted (GET /v1/consumers lists the rest); at least 1m",
    },
    Setting {
        key: "node_name",
        env: "CHIME_NODE_NAME",
        default: "",
        doc: "this node's name in the cluster (default: the host name); a random suffix keeps each process distinct",
    },
    Setting {
        key: "shard_count",
        env: "CHIME_SHARD_COUNT",
        default: "256",
        doc: "shards of a new PostgreSQL cluster (fixed when the first node starts; later nodes use the stored count)",
    },
    Setting {
        key: "lease_ttl",
        env: "CHIME_LEASE_TTL",
        default: "2s",
        doc: "shard lease lifetime after each renewal (database clock); a dead node's shards are taken over after this",
    },
    Setting {
        key: "lease_renew_interval",
        env: "CHIME_LEASE_RENEW_INTERVAL",
        default: "500ms",
        doc: "how often a node renews its leases and rebalances; at most a third of lease_ttl",
    },
    Setting {
        key: "heartbeat_interval",
        env: "CHIME_HEARTBEAT_INTERVAL",
        default: "500ms",
        doc: "how often a node heartbeats in the node registry; at most half of lease_ttl",
    },
    Setting {
        key: "shutdown_timeout",
        env: "CHIME_SHUTDOWN_TIMEOUT",
        default: "10s",
        doc: "how long shutdown waits for in-flight publishes to be confirmed",
    },
    Setting {
        key: "worker_threads",
        env: "CHIME_WORKER_THREADS",
        default: "auto",
        doc: "threads running chimed's tasks: auto (half the CPUs, at least 1) or 1 to 256",
    },
    Setting {
        key: "log_format",
        env: "CHIME_LOG_FORMAT",
        default: "text",
        doc: "log format: text or json",
    },
    Setting {
        key: "log",
        env: "CHIME_LOG",
        default: "info",
        doc: "log filter, RUST_LOG syntax (e.g. info,chime_scheduler=debug)",
    },
];

#[cfg(test)]
mod tests {
    use super::SETTINGS;

    /// The reference in the repository, whose table must list every setting.
    const REFERENCE: &str = include_str!("../../../docs/configuration.md");

    /// The table rows of the reference: (key, environment, default) cells, code spans
    /// unwrapped.
    fn documented() -> Vec<(String, String, String)> {
        let unwrap = |cell: &str| cell.trim().trim_matches('`').to_string();
        REFERENCE
            .lines()
            .filter(|line| line.starts_with("| `"))
            .map(|line| {
                let cells: Vec<&str> = line.split('|').collect();
                (
                    unwrap(cells[1]),
                    unwrap(cells[2]),
                    cells[3].trim().to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn the_reference_table_lists_every_setting_with_its_environment_and_default() {
        let rows = documented();
        let keys: Vec<&str> = rows.iter().map(|(key, _, _)| key.as_str()).collect();
        let listed: Vec<&str> = SETTINGS.iter().map(|s| s.key).collect();
        assert_eq!(
            keys, listed,
            "docs/configuration.md lists the settings in order"
        );
        for ((_, env, default), setting) in rows.iter().zip(SETTINGS) {
            assert_eq!(env, setting.env, "{}", setting.key);
            if setting.default.is_empty() {
                // No value: the reference says in words what happens (`host name`).
                assert!(!default.starts_with('`'), "{}: {default}", setting.key);
            } else {
                assert_eq!(
                    *default,
                    format!("`{}`", setting.default),
                    "{}",
                    setting.key
                );
            }
        }
    }
}
