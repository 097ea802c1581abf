//! `chimed`'s configuration: one struct, every field with a documented default, layered as
//! defaults < TOML file (`--config`) < `CHIME_*` environment < command-line flags.
//! [`SETTINGS`] is the one list of keys, environment variables and defaults.

use std::{collections::BTreeMap, fmt, net::SocketAddr, path::Path, time::Duration};

pub mod urls;

use crate::{
    cluster::ClusterSettings, daemon::http::HttpSettings, dispatch::ObserverCopies,
    domain::duration::HumanDuration,
};
pub use crate::{dispatch::MIN_REPUBLISH_AFTER, telemetry::LogFormat};

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
        doc: "RabbitMQ connection URL",
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

/// `chimed`'s configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Store URL. Default `sqlite://chime.db`.
    pub database_url: String,
    /// RabbitMQ URL. Default `amqp://guest:guest@127.0.0.1:5672/%2f`.
    pub amqp_url: String,
    /// HTTP listen address. Default `127.0.0.1:8080`.
    pub http_addr: SocketAddr,
    /// The API listener's header timeout and connection limit. Defaults: 10 s, 1 024.
    pub http: HttpSettings,
    /// Largest job payload in bytes of JSON. Default 256 KiB.
    pub payload_limit: usize,
    /// Timer look-ahead window. Default 30 s.
    pub lookahead: Duration,
    /// How far ahead of their time fires are recorded; the dispatcher publishes them at
    /// their fire time. Default 2 s; zero records each fire when due.
    pub fire_ahead: Duration,
    /// Which tasks get an observer copy. Default [`ObserverCopies::Registered`].
    pub observer_copies: ObserverCopies,
    /// Lateness past which a fire counts as missed. Default 5 s.
    pub misfire_grace: Duration,
    /// Age at which an unconfirmed run is published again. Default 10 s.
    pub republish_after: Duration,
    /// How often the reconciler looks for overdue runs. Default 1 s.
    pub reconcile_interval: Duration,
    /// How long a takeover or start pass waits for acks of the previous owner's past-due
    /// `scheduled` runs before it publishes them again. Default 500 ms; at most 2 s.
    pub takeover_ack_wait: Duration,
    /// Age (since `finished_at`) past which finished runs are deleted. Default 7 days;
    /// `None` (written `0s`) keeps them forever.
    pub run_retention: Option<Duration>,
    /// Shutdown's wait for in-flight publishes. Default 10 s.
    pub shutdown_timeout: Duration,
    /// Node name; empty means the host name.
    pub node_name: String,
    /// Shard count of a new cluster. Default 256.
    pub shard_count: u32,
    /// Lease timing. Defaults: TTL 2 s, renew every 500 ms, heartbeat every 500 ms (a dead
    /// node's jobs fire again within about 2.5 s; see docs/benchmarks.md, W4).
    pub cluster: ClusterSettings,
    /// Threads of the async runtime; `None` (written `auto`, the default) means half the
    /// CPUs, at least one (see [`Config::worker_threads`]).
    pub worker_threads: Option<usize>,
    /// Log format. Default text.
    pub log_format: LogFormat,
    /// Log filter. Default `info`.
    pub log: String,
}

impl Config {
    /// The async runtime's worker threads on a machine with `cpus` CPUs: the setting, or
    /// half of them, at least one. chimed coordinates work that RabbitMQ and the
    /// database do, which on a small machine share its CPUs; every extra worker wakes
    /// and parks as tasks hop between threads. On 2 CPUs shared with both, one worker
    /// instead of two cut chimed's CPU in a 100 000-task herd by 11 % and the herd's time
    /// by 6 % (docs/benchmarks.md, W1).
    pub fn worker_threads(&self, cpus: usize) -> usize {
        self.worker_threads.unwrap_or((cpus / 2).max(1))
    }
}

/// A configuration problem, naming the key and where its value came from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("config file {path} is not valid TOML: {reason}")]
    Toml {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A key nobody reads.
    #[error("unknown config key {key:?} in {path}{}", suggestion.map(|s| format!(" (did you mean {s:?}?)")).unwrap_or_default())]
    UnknownKey {
        /// The file.
        path: String,
        /// The key.
        key: String,
        /// The closest known key.
        suggestion: Option<&'static str>,
    },
    /// A value that does not parse or is out of range.
    #[error("invalid {key} {value:?} (from {origin}): {reason}")]
    Invalid {
        /// The key.
        key: &'static str,
        /// The value.
        value: String,
        /// Where it came from.
        origin: Source,
        /// Why it is invalid.
        reason: String,
    },
}

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The built-in default.
    Default,
    /// The config file.
    File(String),
    /// An environment variable.
    Env(&'static str),
    /// A command-line flag.
    Flag,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File(path) => write!(f, "file {path}"),
            Source::Env(var) => write!(f, "environment {var}"),
            Source::Flag => f.write_str("command line"),
        }
    }
}

/// Values collected from the layers, later ones winning.
#[derive(Debug, Clone, Default)]
pub struct Layers {
    values: BTreeMap<&'static str, (String, Source)>,
}

impl Layers {
    /// Starts from the defaults.
    pub fn new() -> Self {
        let mut layers = Self::default();
        for s in SETTINGS {
            layers
                .values
                .insert(s.key, (s.default.to_string(), Source::Default));
        }
        layers
    }

    /// Applies a TOML file.
    pub fn file(mut self, path: &Path) -> Result<Self, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        self.apply_toml(&text, &shown)?;
        Ok(self)
    }

    fn apply_toml(&mut self, text: &str, path: &str) -> Result<(), ConfigError> {
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| ConfigError::Toml {
                path: path.to_string(),
                reason: e.to_string(),
            })?;
        for (key, value) in table {
            let Some(setting) = SETTINGS.iter().find(|s| s.key == key) else {
                return Err(ConfigError::UnknownKey {
                    path: path.to_string(),
                    suggestion: closest_key(&key),
                    key,
                });
            };
            let text = match value {
                toml::Value::String(s) => s,
                toml::Value::Integer(i) => i.to_string(),
                other => other.to_string(),
            };
            self.values
                .insert(setting.key, (text, Source::File(path.to_string())));
        }
        Ok(())
    }

    /// Applies `CHIME_*` variables from `lookup` (the process environment in `chimed`).
    pub fn env(mut self, lookup: impl Fn(&str) -> Option<String>) -> Self {
        for s in SETTINGS {
            if let Some(value) = lookup(s.env).filter(|v| !v.is_empty()) {
                self.values.insert(s.key, (value, Source::Env(s.env)));
            }
        }
        self
    }

    /// Applies a command-line flag for `key` when given.
    pub fn flag(mut self, key: &'static str, value: Option<&str>) -> Self {
        debug_assert!(SETTINGS.iter().any(|s| s.key == key), "unknown key {key}");
        if let Some(value) = value {
            self.values.insert(key, (value.to_string(), Source::Flag));
        }
        self
    }

    /// Parses and validates the merged values.
    pub fn build(self) -> Result<Config, ConfigError> {
        let get = |key: &'static str| self.values.get(key).expect("every key has a default");
        let parse = |key: &'static str| -> Parsed<'_> {
            let (value, source) = get(key);
            Parsed { key, value, source }
        };
        let config = Config {
            database_url: parse("database_url")
                .with(|v| urls::check_database_url(v).map(|()| v.to_string()))?,
            amqp_url: parse("amqp_url")
                .with(|v| urls::check_amqp_url(v).map(|()| v.to_string()))?,
            http_addr: parse("http_addr")
                .with(|v| v.parse::<SocketAddr>().map_err(|e| e.to_string()))?,
            http: HttpSettings {
                header_timeout: parse("http_header_timeout").duration()?,
                max_connections: parse("http_max_connections").count(65_536)?,
            },
            payload_limit: parse("payload_limit").with(parse_size)?,
            lookahead: parse("lookahead").duration()?,
            fire_ahead: parse("fire_ahead").duration()?,
            observer_copies: parse("observer_copies").with(|v| match v {
                "registered" => Ok(ObserverCopies::Registered),
                "all" => Ok(ObserverCopies::All),
                _ => Err("use registered or all".to_string()),
            })?,
            misfire_grace: parse("misfire_grace").duration()?,
            republish_after: parse("republish_after").duration()?,
            reconcile_interval: parse("reconcile_interval").duration()?,
            takeover_ack_wait: parse("takeover_ack_wait").duration()?,
            run_retention: Some(parse("run_retention").duration()?).filter(|age| !age.is_zero()),
            shutdown_timeout: parse("shutdown_timeout").duration()?,
            node_name: parse("node_name").text(),
            shard_count: parse("shard_count").with(|v| {
                v.parse::<u32>()
                    .ok()
                    .filter(|n| (1..=65_536).contains(n))
                    .ok_or_else(|| "use a whole number from 1 to 65536".to_string())
            })?,
            cluster: ClusterSettings {
                lease_ttl: parse("lease_ttl").duration()?,
                renew_interval: parse("lease_renew_interval").duration()?,
                heartbeat_interval: parse("heartbeat_interval").duration()?,
            },
            worker_threads: parse("worker_threads").with(|v| match v {
                "auto" => Ok(None),
                n => n
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=256).contains(n))
                    .map(Some)
                    .ok_or_else(|| "use auto or a whole number from 1 to 256".to_string()),
            })?,
            log_format: parse("log_format")
                .with(|v| LogFormat::parse(v).ok_or_else(|| "use text or json".to_string()))?,
            log: parse("log").text(),
        };
        parse("payload_limit").check(
            (1024..=16 * 1024 * 1024).contains(&config.payload_limit),
            "use 1KiB to 16MiB",
        )?;
        parse("http_header_timeout").check(
            (Duration::from_secs(1)..=Duration::from_secs(600))
                .contains(&config.http.header_timeout),
            "use 1s to 10m",
        )?;
        parse("lookahead").check(
            config.lookahead >= Duration::from_secs(1),
            "use at least 1s",
        )?;
        // The timer arms only jobs it holds: the window must reach well past the horizon.
        parse("fire_ahead").check(
            config.fire_ahead <= Duration::from_secs(10)
                && config.fire_ahead * 2 <= config.lookahead,
            "use 0s to 10s, and at most half of lookahead",
        )?;
        parse("republish_after").check(
            config.republish_after >= MIN_REPUBLISH_AFTER,
            "use at least 1s",
        )?;
        parse("reconcile_interval").check(
            (Duration::from_millis(100)..=Duration::from_secs(60))
                .contains(&config.reconcile_interval),
            "use 100ms to 60s",
        )?;
        // Waited on every takeover: longer would eat into the failover gap's 3 s target.
        parse("takeover_ack_wait").check(
            config.takeover_ack_wait <= Duration::from_secs(2),
            "use 0s to 2s",
        )?;
        parse("run_retention").check(
            config
                .run_retention
                .is_none_or(|age| age >= Duration::from_secs(3600)),
            "use 0s (keep forever) or at least 1h",
        )?;
        let cluster = config.cluster;
        parse("lease_ttl").check(
            cluster.lease_ttl >= Duration::from_secs(1),
            "use at least 1s",
        )?;
        // A node trusts a lease for 80 % of the TTL after renewing; renewing at most every
        // third of it leaves room for a failed attempt before the trust runs out.
        parse("lease_renew_interval").check(
            cluster.renew_interval >= Duration::from_millis(100)
                && cluster.renew_interval * 3 <= cluster.lease_ttl,
            "use at least 100ms and at most a third of lease_ttl",
        )?;
        parse("heartbeat_interval").check(
            cluster.heartbeat_interval >= Duration::from_millis(100)
                && cluster.heartbeat_interval * 2 <= cluster.lease_ttl,
            "use at least 100ms and at most half of lease_ttl",
        )?;
        Ok(config)
    }
}

struct Parsed<'a> {
    key: &'static str,
    value: &'a str,
    source: &'a Source,
}

impl Parsed<'_> {
    fn text(&self) -> String {
        self.value.to_string()
    }

    fn with<T>(&self, f: impl FnOnce(&str) -> Result<T, String>) -> Result<T, ConfigError> {
        f(self.value.trim()).map_err(|reason| self.invalid(reason))
    }

    fn duration(&self) -> Result<Duration, ConfigError> {
        self.with(|v| HumanDuration::parse(v).map(HumanDuration::get))
    }

    /// A whole number from 1 to `max`.
    fn count(&self, max: usize) -> Result<usize, ConfigError> {
        self.with(|v| {
            v.parse::<usize>()
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| format!("use a whole number from 1 to {max}"))
        })
    }

    fn check(&self, ok: bool, reason: &str) -> Result<(), ConfigError> {
        if ok {
            Ok(())
        } else {
            Err(self.invalid(reason.to_string()))
        }
    }

    fn invalid(&self, reason: String) -> ConfigError {
        // A URL's password never reaches an error.
        let value = if self.key.ends_with("_url") {
            chime_consumer::url::redact(self.value)
        } else {
            self.value.to_string()
        };
        ConfigError::Invalid {
            key: self.key,
            value,
            origin: self.source.clone(),
            reason,
        }
    }
}

/// Parses `262144`, `256KiB`, `1MiB`, `512B` (KB/MB are read as KiB/MiB).
pub fn parse_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: usize = number
        .parse()
        .map_err(|_| format!("expected a size like 262144 or 256KiB, got {text:?}"))?;
    let factor = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "kb" | "k" => 1024,
        "mib" | "mb" | "m" => 1024 * 1024,
        other => return Err(format!("unknown size unit {other:?}: use B, KiB or MiB")),
    };
    number
        .checked_mul(factor)
        .ok_or_else(|| format!("size {text:?} is too large"))
}

fn closest_key(key: &str) -> Option<&'static str> {
    SETTINGS
        .iter()
        .map(|s| (s.key, strsim::jaro_winkler(key, s.key)))
        .filter(|(_, score)| *score > 0.8)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn defaults_match_the_public_surface() {
        let config = Layers::new().env(no_env).build().unwrap();
        assert_eq!(config.database_url, "sqlite://chime.db");
        assert_eq!(config.amqp_url, "amqp://guest:guest@127.0.0.1:5672/%2f");
        assert_eq!(config.http_addr, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(config.payload_limit, 256 * 1024);
        assert_eq!(config.http, HttpSettings::default());
        assert_eq!(config.http.header_timeout, Duration::from_secs(10));
        assert_eq!(config.http.max_connections, 1024);
        assert_eq!(config.misfire_grace, Duration::from_secs(5));
        assert_eq!(config.fire_ahead, Duration::from_secs(2));
        assert_eq!(config.observer_copies, ObserverCopies::Registered);
        assert_eq!(config.shard_count, 256);
        assert_eq!(config.worker_threads, None);
        assert_eq!(config.worker_threads(2), 1);
        assert_eq!(config.worker_threads(1), 1);
        assert_eq!(config.worker_threads(8), 4);
        assert_eq!(config.cluster, ClusterSettings::default());
        assert_eq!(
            config.run_retention,
            Some(Duration::from_secs(7 * 24 * 3600))
        );
    }

    #[test]
    fn takeover_ack_wait_is_off_or_at_most_two_seconds() {
        let with = |value: &'static str| {
            Layers::new()
                .env(move |var| (var == "CHIME_TAKEOVER_ACK_WAIT").then(|| value.to_string()))
                .build()
        };
        assert_eq!(
            Layers::new().build().unwrap().takeover_ack_wait,
            crate::reconcile::TAKEOVER_ACK_WAIT
        );
        assert_eq!(with("0s").unwrap().takeover_ack_wait, Duration::ZERO);
        assert_eq!(
            with("2s").unwrap().takeover_ack_wait,
            Duration::from_secs(2)
        );
        let err = with("2001ms").unwrap_err().to_string();
        assert!(err.contains("use 0s to 2s"), "{err}");
    }

    #[test]
    fn run_retention_is_off_or_at_least_an_hour() {
        let with = |value: &'static str| {
            Layers::new()
                .env(move |var| (var == "CHIME_RUN_RETENTION").then(|| value.to_string()))
                .build()
        };
        assert_eq!(with("0s").unwrap().run_retention, None);
        assert_eq!(
            with("30d").unwrap().run_retention,
            Some(Duration::from_secs(30 * 24 * 3600))
        );
        let err = with("10m").unwrap_err().to_string();
        assert!(
            err.contains("use 0s (keep forever) or at least 1h"),
            "{err}"
        );
    }

    #[test]
    fn lease_timing_must_leave_room_to_renew() {
        let env = |var: &str| match var {
            "CHIME_LEASE_TTL" => Some("3s".to_string()),
            "CHIME_LEASE_RENEW_INTERVAL" => Some("2s".to_string()),
            _ => None,
        };
        let err = Layers::new().env(env).build().unwrap_err().to_string();
        assert!(err.contains("at most a third of lease_ttl"), "{err}");
        let env = |var: &str| match var {
            "CHIME_LEASE_TTL" => Some("3s".to_string()),
            "CHIME_LEASE_RENEW_INTERVAL" => Some("1s".to_string()),
            "CHIME_HEARTBEAT_INTERVAL" => Some("1s".to_string()),
            _ => None,
        };
        let config = Layers::new().env(env).build().unwrap();
        assert_eq!(config.cluster.lease_ttl, Duration::from_secs(3));
    }

    #[test]
    fn flags_override_env_override_file() {
        let mut layers = Layers::new();
        layers
            .apply_toml("http_addr = \"0.0.0.0:1\"\ndatabase_url = \"sqlite://file.db\"\npayload_limit = 2048", "chime.toml")
            .unwrap();
        let env = |var: &str| match var {
            "CHIME_HTTP_ADDR" => Some("0.0.0.0:2".to_string()),
            "CHIME_LOOKAHEAD" => Some("1m".to_string()),
            _ => None,
        };
        let config = layers
            .env(env)
            .flag("http_addr", Some("0.0.0.0:3"))
            .build()
            .unwrap();
        assert_eq!(config.http_addr.port(), 3);
        assert_eq!(config.database_url, "sqlite://file.db");
        assert_eq!(config.lookahead, Duration::from_secs(60));
        assert_eq!(config.payload_limit, 2048);
    }

    #[test]
    fn unknown_keys_get_a_suggestion() {
        let err = Layers::new()
            .apply_toml("databse_url = \"x\"", "c.toml")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown config key \"databse_url\" in c.toml (did you mean \"database_url\"?)"
        );
    }

    #[test]
    fn invalid_values_name_key_and_source() {
        let env = |var: &str| (var == "CHIME_MISFIRE_GRACE").then(|| "soon".to_string());
        let err = Layers::new().env(env).build().unwrap_err().to_string();
        assert!(
            err.starts_with(
                "invalid misfire_grace \"soon\" (from environment CHIME_MISFIRE_GRACE)"
            ),
            "{err}"
        );
        let err = Layers::new()
            .flag("payload_limit", Some("1B"))
            .build()
            .unwrap_err()
            .to_string();
        assert!(err.contains("use 1KiB to 16MiB"), "{err}");
        for (ahead, lookahead) in [("11s", "60s"), ("5s", "8s")] {
            let err = Layers::new()
                .flag("fire_ahead", Some(ahead))
                .flag("lookahead", Some(lookahead))
                .build()
                .unwrap_err()
                .to_string();
            assert!(err.contains("at most half of lookahead"), "{err}");
        }
        let off = Layers::new()
            .flag("fire_ahead", Some("0s"))
            .build()
            .unwrap();
        assert_eq!(off.fire_ahead, Duration::ZERO);
        let env = |var: &str| (var == "CHIME_OBSERVER_COPIES").then(|| "all".to_string());
        let all = Layers::new().env(env).build().unwrap();
        assert_eq!(all.observer_copies, ObserverCopies::All);
        for threads in ["0", "many", "257"] {
            let err = Layers::new()
                .flag("worker_threads", Some(threads))
                .build()
                .unwrap_err()
                .to_string();
            assert!(err.contains("use auto or a whole number"), "{err}");
        }
        let env = |var: &str| (var == "CHIME_WORKER_THREADS").then(|| "3".to_string());
        let three = Layers::new().env(env).build().unwrap();
        assert_eq!(three.worker_threads(2), 3, "a set count wins over the CPUs");
        let err = Layers::new()
            .flag("observer_copies", Some("some"))
            .build()
            .unwrap_err()
            .to_string();
        assert!(err.contains("use registered or all"), "{err}");
    }

    #[test]
    fn http_limits_are_bounded() {
        for (key, value, reason) in [
            ("http_header_timeout", "0s", "use 1s to 10m"),
            ("http_header_timeout", "1h", "use 1s to 10m"),
            ("http_max_connections", "0", "from 1 to 65536"),
            ("http_max_connections", "lots", "from 1 to 65536"),
        ] {
            let err = Layers::new()
                .flag(key, Some(value))
                .build()
                .unwrap_err()
                .to_string();
            assert!(err.contains(reason), "{key}={value}: {err}");
        }
        let env = |var: &str| match var {
            "CHIME_HTTP_HEADER_TIMEOUT" => Some("2s".to_string()),
            "CHIME_HTTP_MAX_CONNECTIONS" => Some("8".to_string()),
            _ => None,
        };
        let config = Layers::new().env(env).build().unwrap();
        assert_eq!(
            config.http,
            HttpSettings {
                header_timeout: Duration::from_secs(2),
                max_connections: 8
            }
        );
    }

    #[test]
    fn bad_urls_never_show_their_password() {
        for (key, url) in [
            ("database_url", "mysql://u:hunter22@h/db"),
            (
                "database_url",
                "postgres://u@h/db?password=hunter22&sslmode=require",
            ),
            ("amqp_url", "amqps://u:hunter22@h/%2f"),
            ("amqp_url", "amqp://u:hunter22@h:port/%2f"),
        ] {
            let err = Layers::new()
                .flag(key, Some(url))
                .build()
                .unwrap_err()
                .to_string();
            assert!(err.starts_with(&format!("invalid {key} ")), "{err}");
            assert!(!err.contains("hunter22"), "{err}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("256KiB"), Ok(262_144));
        assert_eq!(parse_size("1MiB"), Ok(1_048_576));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("1GiB").is_err());
        assert!(parse_size("lots").is_err());
    }
}
