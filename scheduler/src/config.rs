//! `chimed`'s configuration: one struct, every field with a documented default, layered as
//! defaults < TOML file (`--config`) < `CHIME_*` environment < command-line flags.
//! [`SETTINGS`] is the one list of keys, environment variables and defaults.

use std::{collections::BTreeMap, fmt, net::SocketAddr, path::Path, time::Duration};

mod settings;
pub mod urls;

pub use settings::{SETTINGS, Setting};

use crate::{
    cluster::ClusterSettings,
    daemon::{
        http::HttpSettings,
        tls::{MissingTlsSetting, TlsFiles},
    },
    dispatch::ObserverCopies,
    domain::{duration::HumanDuration, reply_auth::ReplyUsers},
};
pub use crate::{dispatch::MIN_REPUBLISH_AFTER, telemetry::LogFormat};

/// `chimed`'s configuration. Each field is the setting of the same name in [`SETTINGS`]
/// (two settings make up `http`, two `http_tls` and three `cluster`), which gives its default,
/// environment variable and meaning; [`Config::default`] is every default.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `database_url`: the store.
    pub database_url: String,
    /// `amqp_url`: RabbitMQ.
    pub amqp_url: String,
    /// `http_addr`: the API's listen address.
    pub http_addr: SocketAddr,
    /// `http_header_timeout` and `http_max_connections`: the API listener's limits.
    pub http: HttpSettings,
    /// `admin_token_file`: the bootstrap admin token's file; `None` (written empty)
    /// means no bootstrap token.
    pub admin_token_file: Option<std::path::PathBuf>,
    /// `metrics_auth`: whether `/metrics` needs a token.
    pub metrics_need_token: bool,
    /// `http_tls_cert_file` and `http_tls_key_file`: serve the API over HTTPS with this
    /// certificate and key; `None` (both unset) serves plain HTTP.
    pub http_tls: Option<TlsFiles>,
    /// `app_max_jobs` and `app_max_groups`: per-app quotas.
    pub quotas: crate::domain::quota::Quotas,
    /// `reply_users`: which RabbitMQ users may answer for which groups; `None` (unset)
    /// lets any user answer.
    pub reply_users: Option<ReplyUsers>,
    /// `payload_limit`: largest job payload in bytes of JSON.
    pub payload_limit: usize,
    /// `lookahead`: the timer's look-ahead window.
    pub lookahead: Duration,
    /// `fire_ahead`: how far ahead of their time fires are recorded; the dispatcher
    /// publishes them at their fire time. Zero records each fire when due.
    pub fire_ahead: Duration,
    /// `observer_copies`: which tasks get an observer copy.
    pub observer_copies: ObserverCopies,
    /// `misfire_grace`: lateness past which a fire counts as missed.
    pub misfire_grace: Duration,
    /// `republish_after`: age at which an unconfirmed run is published again.
    pub republish_after: Duration,
    /// `reconcile_interval`: how often the reconciler looks for overdue runs.
    pub reconcile_interval: Duration,
    /// `takeover_ack_wait`: how long a takeover or start pass waits for acks of the
    /// previous owner's past-due `scheduled` runs before it publishes them again.
    pub takeover_ack_wait: Duration,
    /// `run_retention`: age (since `finished_at`) past which finished runs are deleted;
    /// `None` (written `0s`) keeps them forever.
    pub run_retention: Option<Duration>,
    /// `consumer_retention`: how long a consumer instance is kept after its last presence.
    pub consumer_retention: Duration,
    /// `shutdown_timeout`: shutdown's wait for in-flight publishes.
    pub shutdown_timeout: Duration,
    /// `node_name`: the node's name; empty means the host name.
    pub node_name: String,
    /// `shard_count`: shards of a new cluster.
    pub shard_count: u32,
    /// `lease_ttl`, `lease_renew_interval` and `heartbeat_interval`: lease timing (with
    /// the defaults a dead node's jobs fire again within about 2.5 s; see
    /// docs/benchmarks.md, W4).
    pub cluster: ClusterSettings,
    /// `worker_threads`: threads of the async runtime; `None` (written `auto`) means
    /// half the CPUs, at least one (see [`Config::worker_threads`]).
    pub worker_threads: Option<usize>,
    /// `log_format`.
    pub log_format: LogFormat,
    /// `log`: the log filter.
    pub log: String,
    /// What `chimed` should log as warnings once logging is set up: a URL with a
    /// password given as a command-line flag (visible to every user in `ps`). Not a
    /// setting.
    pub warnings: Vec<String>,
}

impl Default for Config {
    /// Every setting at its default, as [`SETTINGS`] writes it.
    fn default() -> Self {
        Layers::new()
            .build()
            .expect("the defaults in SETTINGS are valid (config::tests checks them)")
    }
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

    /// The value of `key` (a URL), or the contents of the file `file_key` names (one
    /// trailing newline stripped), whichever was given at the later layer; both at the
    /// same layer is an error. The source says where the value came from.
    fn url_or_file(
        &self,
        key: &'static str,
        file_key: &'static str,
    ) -> Result<(String, Source), ConfigError> {
        let (value, source) = &self.values[key];
        let (path, file_source) = &self.values[file_key];
        let path = path.trim();
        let rank = |source: &Source| match source {
            Source::Default => 0,
            Source::File(_) => 1,
            Source::Env(_) => 2,
            Source::Flag => 3,
        };
        if path.is_empty() || rank(source) > rank(file_source) {
            return Ok((value.clone(), source.clone()));
        }
        let invalid = |reason: String| ConfigError::Invalid {
            key: file_key,
            value: path.to_string(),
            origin: file_source.clone(),
            reason,
        };
        if rank(source) == rank(file_source) {
            return Err(invalid(format!(
                "{key} is given too (from {source}): give one of them"
            )));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| invalid(format!("cannot read the file: {e}")))?;
        let text = text.strip_suffix('\n').unwrap_or(&text);
        let text = text.strip_suffix('\r').unwrap_or(text);
        Ok((text.to_string(), file_source.clone()))
    }

    /// A warning for each URL with a password (userinfo or query) given as a flag.
    fn flag_password_warnings(&self) -> Vec<String> {
        [
            ("database_url", "CHIME_DATABASE_URL"),
            ("amqp_url", "CHIME_AMQP_URL"),
        ]
        .into_iter()
        .filter(|(key, _)| {
            let (value, source) = &self.values[key];
            *source == Source::Flag && chime_consumer::url::redact(value) != *value
        })
        .map(|(key, env)| {
            format!(
                "the --{} flag holds a password, which every user of this machine can \
                     read in ps; set {env} or {env}_FILE instead",
                key.replace('_', "-")
            )
        })
        .collect()
    }

    /// Parses and validates the merged values.
    pub fn build(self) -> Result<Config, ConfigError> {
        let get = |key: &'static str| self.values.get(key).expect("every key has a default");
        let parse = |key: &'static str| -> Parsed<'_> {
            let (value, source) = get(key);
            Parsed { key, value, source }
        };
        let (database_url, database_source) =
            self.url_or_file("database_url", "database_url_file")?;
        let (amqp_url, amqp_source) = self.url_or_file("amqp_url", "amqp_url_file")?;
        let url = |key, value, source| Parsed { key, value, source };
        let config = Config {
            database_url: url("database_url", &database_url, &database_source)
                .with(|v| urls::check_database_url(v).map(|()| v.to_string()))?,
            amqp_url: url("amqp_url", &amqp_url, &amqp_source)
                .with(|v| urls::check_amqp_url(v).map(|()| v.to_string()))?,
            http_addr: parse("http_addr")
                .with(|v| v.parse::<SocketAddr>().map_err(|e| e.to_string()))?,
            http: HttpSettings {
                header_timeout: parse("http_header_timeout").duration()?,
                max_connections: parse("http_max_connections").count(65_536)?,
            },
            admin_token_file: Some(parse("admin_token_file").text())
                .filter(|path| !path.is_empty())
                .map(std::path::PathBuf::from),
            metrics_need_token: parse("metrics_auth").with(|v| match v {
                "token" => Ok(true),
                "open" => Ok(false),
                _ => Err("use token or open".to_string()),
            })?,
            http_tls: TlsFiles::from_settings(
                parse("http_tls_cert_file").value,
                parse("http_tls_key_file").value,
            )
            .map_err(|missing| match missing {
                MissingTlsSetting::Key => parse("http_tls_cert_file").invalid(missing.to_string()),
                MissingTlsSetting::Cert => parse("http_tls_key_file").invalid(missing.to_string()),
            })?,
            quotas: crate::domain::quota::Quotas {
                max_jobs: parse("app_max_jobs").with(parse_count)?,
                max_groups: parse("app_max_groups").with(parse_count)?,
            },
            reply_users: parse("reply_users").with(ReplyUsers::parse)?,
            payload_limit: parse("payload_limit").with(parse_size)?,
            lookahead: parse("lookahead").duration()?,
            fire_ahead: parse("fire_ahead").duration()?,
            observer_copies: parse("observer_copies").with(|v| {
                ObserverCopies::parse(v).ok_or_else(|| "use registered or all".to_string())
            })?,
            misfire_grace: parse("misfire_grace").duration()?,
            republish_after: parse("republish_after").duration()?,
            reconcile_interval: parse("reconcile_interval").duration()?,
            takeover_ack_wait: parse("takeover_ack_wait").duration()?,
            run_retention: Some(parse("run_retention").duration()?).filter(|age| !age.is_zero()),
            consumer_retention: parse("consumer_retention").duration()?,
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
            warnings: self.flag_password_warnings(),
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
        // Far longer than an instance counts as live (15 s), or live ones would vanish.
        parse("consumer_retention").check(
            config.consumer_retention >= Duration::from_secs(60),
            "use at least 1m",
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

/// A whole number of things, 0 meaning no limit.
fn parse_count(value: &str) -> Result<u64, String> {
    value
        .parse::<u64>()
        .map_err(|_| "use a whole number (0: no limit)".to_string())
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
mod tests;
