//! `chimed`'s command line: its flags, and a `--help` that describes the daemon and
//! lists every setting with its environment variable (from [`SETTINGS`], so the list
//! cannot drift from what the configuration reads).

use std::path::PathBuf;

use clap::Parser;

use crate::config::{ConfigError, Layers, SETTINGS};

/// Where the configuration reference lives, for `--help`.
pub const CONFIGURATION_REFERENCE: &str = concat!(
    env!("CARGO_PKG_REPOSITORY"),
    "/blob/main/docs/configuration.md"
);

/// `chimed`'s flags.
#[derive(Debug, Parser)]
#[command(
    name = "chimed",
    version = crate::VERSION,
    about = "chimed, the Chime scheduler daemon: fires due jobs by publishing tasks to \
             RabbitMQ, records their runs in SQLite or PostgreSQL, and serves the HTTP API \
             that chimectl talks to.",
    long_about = None,
    after_help = settings_help(false),
    after_long_help = settings_help(true),
)]
pub struct Args {
    /// TOML configuration file (keys as listed below).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Store URL: sqlite://FILE or postgres://USER:PASS@HOST/DB. Env CHIME_DATABASE_URL.
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// RabbitMQ URL, amqp://USER:PASS@HOST:PORT/VHOST. Env CHIME_AMQP_URL.
    #[arg(long, value_name = "URL")]
    pub amqp_url: Option<String>,
    /// HTTP listen address. Env CHIME_HTTP_ADDR.
    #[arg(long, value_name = "ADDR")]
    pub http_addr: Option<String>,
    /// This node's name in the cluster. Env CHIME_NODE_NAME.
    #[arg(long, value_name = "NAME")]
    pub node_name: Option<String>,
    /// Log format, text or json. Env CHIME_LOG_FORMAT.
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<String>,
}

impl Args {
    /// The configuration: defaults, then the file, then the environment (read through
    /// `env`), then these flags.
    pub fn layers(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<crate::config::Config, ConfigError> {
        let mut layers = Layers::new();
        if let Some(path) = &self.config {
            layers = layers.file(path)?;
        }
        layers
            .env(env)
            .flag("database_url", self.database_url.as_deref())
            .flag("amqp_url", self.amqp_url.as_deref())
            .flag("http_addr", self.http_addr.as_deref())
            .flag("node_name", self.node_name.as_deref())
            .flag("log_format", self.log_format.as_deref())
            .build()
    }
}

/// The text after the flags in `--help`: how settings layer, and every setting's key,
/// environment variable and default (with what it does when `long`).
fn settings_help(long: bool) -> String {
    let key_width = SETTINGS.iter().map(|s| s.key.len()).max().unwrap_or(0);
    let env_width = SETTINGS.iter().map(|s| s.env.len()).max().unwrap_or(0);
    let mut text = String::from(
        "Settings come from, in increasing precedence: defaults, the --config file, \
         environment variables, flags. The flags above cover the settings most often \
         changed; set any other in the --config file or with its environment variable.\n\n\
         Settings (file key, environment variable, default):\n",
    );
    for setting in SETTINGS {
        let default = if setting.default.is_empty() {
            "(none)"
        } else {
            setting.default
        };
        text.push_str(&format!(
            "  {:key_width$}  {:env_width$}  {default}\n",
            setting.key, setting.env
        ));
        if long {
            text.push_str(&format!("      {}\n", setting.doc));
        }
    }
    text.push_str(&format!(
        "\nReference: docs/configuration.md in the repository ({CONFIGURATION_REFERENCE})."
    ));
    if !long {
        text.push_str("\nWith --help: what each setting does.");
    }
    text
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn help(flag: &str) -> String {
        let error = Args::try_parse_from(["chimed", flag]).expect_err("help exits");
        error.to_string()
    }

    #[test]
    fn help_describes_chimed_and_lists_every_settings_environment_variable() {
        for flag in ["-h", "--help"] {
            let text = help(flag);
            assert!(text.contains("Chime scheduler daemon"), "{text}");
            assert!(!text.contains("CLI (chimectl)"), "{text}");
            assert!(text.contains("docs/configuration.md"), "{text}");
            for setting in SETTINGS {
                assert!(
                    text.lines().any(|l| {
                        l.split_whitespace().take(2).collect::<Vec<_>>()
                            == [setting.key, setting.env]
                    }),
                    "{flag} lists {} with {}:\n{text}",
                    setting.key,
                    setting.env
                );
            }
        }
        assert!(help("--help").contains(SETTINGS[0].doc));
    }

    #[test]
    fn version_names_the_program_and_its_commit() {
        let version = Args::command().render_version();
        assert_eq!(
            version.trim(),
            format!(
                "chimed {} (commit {})",
                env!("CARGO_PKG_VERSION"),
                crate::GIT_COMMIT
            )
        );
        assert!(!crate::GIT_COMMIT.is_empty());
    }

    #[test]
    fn every_flag_is_a_setting_and_named_in_the_reference() {
        const REFERENCE: &str = include_str!("../../../docs/configuration.md");
        let command = Args::command();
        let flags: Vec<&str> = command
            .get_arguments()
            .filter_map(|arg| arg.get_long())
            .filter(|long| !["config", "help", "version"].contains(long))
            .collect();
        assert!(!flags.is_empty());
        for flag in flags {
            let key = flag.replace('-', "_");
            assert!(SETTINGS.iter().any(|s| s.key == key), "--{flag}");
            assert!(REFERENCE.contains(&format!("`--{flag}`")), "--{flag}");
        }
    }

    #[test]
    fn flags_override_the_environment() {
        let args = Args::try_parse_from(["chimed", "--http-addr", "127.0.0.1:9999"]).unwrap();
        let env = |var: &str| (var == "CHIME_HTTP_ADDR").then(|| "127.0.0.1:1".to_string());
        let config = args.layers(env).unwrap();
        assert_eq!(config.http_addr.to_string(), "127.0.0.1:9999");
    }
}
