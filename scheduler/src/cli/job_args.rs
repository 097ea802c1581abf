//! `chimectl job add`: a job from flags, or from a JSON file as the API takes it.

use std::{io::Read, path::PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Map, Value, json};

/// Flags of `job add`. Either `--file` or `--name`, a schedule and `--group`.
#[derive(Debug, Args)]
pub struct AddArgs {
    /// The job as JSON (as `POST /v1/jobs` takes it); `-` reads standard input.
    #[arg(short, long, conflicts_with_all = ["name", "cron", "every", "at", "group", "mode", "zones", "shards"])]
    pub file: Option<PathBuf>,
    /// Job name, unique within the app.
    #[arg(long)]
    pub name: Option<String>,
    /// App namespace (default "default").
    #[arg(long)]
    pub app: Option<String>,
    /// Cron expression, seconds first: "0 */2 * * * *".
    #[arg(long, conflicts_with_all = ["every", "at"])]
    pub cron: Option<String>,
    /// IANA timezone of --cron (default UTC).
    #[arg(long, requires = "cron")]
    pub timezone: Option<String>,
    /// Fixed interval: "30s", "5m".
    #[arg(long, conflicts_with = "at")]
    pub every: Option<String>,
    /// One-shot instant, RFC 3339.
    #[arg(long)]
    pub at: Option<String>,
    /// Target consumer group.
    #[arg(long)]
    pub group: Option<String>,
    /// Delivery mode: group (one instance runs each fire; the default), broadcast (every
    /// live instance), zone (one instance per zone) or sharded (--shards items per fire).
    #[arg(long)]
    pub mode: Option<String>,
    /// Zone mode: the zones that each run every fire, comma-separated ("dc1,dc2");
    /// without it, every zone with live consumers.
    #[arg(long, value_delimiter = ',')]
    pub zones: Option<Vec<String>>,
    /// Sharded mode: items per fire (1 to 1024).
    #[arg(long)]
    pub shards: Option<u32>,
    /// Payload JSON.
    #[arg(long)]
    pub payload: Option<String>,
    /// Ack timeout: "30s".
    #[arg(long)]
    pub ack_timeout: Option<String>,
    /// Max delivery attempts.
    #[arg(long)]
    pub max_attempts: Option<u32>,
    /// Misfire policy: fire_once, skip, catch_up.
    #[arg(long)]
    pub misfire: Option<String>,
    /// Most missed fires replayed by catch_up.
    #[arg(long)]
    pub catch_up_limit: Option<u32>,
    /// Create the job paused.
    #[arg(long)]
    pub paused: bool,
}

impl AddArgs {
    /// The request body.
    pub fn to_request(&self) -> anyhow::Result<Value> {
        if let Some(path) = &self.file {
            let text = if path.as_os_str() == "-" {
                let mut text = String::new();
                std::io::stdin()
                    .read_to_string(&mut text)
                    .context("reading standard input")?;
                text
            } else {
                std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?
            };
            return serde_json::from_str(&text)
                .with_context(|| format!("{} is not JSON", path.display()));
        }
        let Some(name) = &self.name else {
            bail!("give --name (or --file)")
        };
        let Some(group) = &self.group else {
            bail!("give --group, the consumer group to send tasks to")
        };
        let schedule = match (&self.cron, &self.every, &self.at) {
            (Some(cron), None, None) => {
                let mut s = json!({"cron": cron});
                if let Some(tz) = &self.timezone {
                    s["timezone"] = json!(tz);
                }
                s
            }
            (None, Some(every), None) => json!({"every": every}),
            (None, None, Some(at)) => json!({"at": at}),
            _ => bail!("give one schedule: --cron, --every or --at"),
        };
        let mut body = Map::new();
        body.insert("name".into(), json!(name));
        body.insert("schedule".into(), schedule);
        body.insert("target".into(), self.target(group));
        if let Some(app) = &self.app {
            body.insert("app".into(), json!(app));
        }
        if let Some(payload) = &self.payload {
            let payload: Value = serde_json::from_str(payload).context("--payload is not JSON")?;
            body.insert("payload".into(), payload);
        }
        let optional = [
            ("ack_timeout", self.ack_timeout.as_ref().map(|v| json!(v))),
            ("max_attempts", self.max_attempts.map(|v| json!(v))),
            ("misfire", self.misfire.as_ref().map(|v| json!(v))),
            ("catch_up_limit", self.catch_up_limit.map(|v| json!(v))),
            ("paused", self.paused.then_some(json!(true))),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                body.insert(key.into(), value);
            }
        }
        Ok(Value::Object(body))
    }

    /// The `target` object: the group and whichever of mode, zones and shards were given
    /// (the server checks that they fit together).
    fn target(&self, group: &str) -> Value {
        let mut target = json!({"group": group});
        if let Some(mode) = &self.mode {
            target["mode"] = json!(mode);
        }
        if let Some(zones) = &self.zones {
            target["zones"] = json!(zones);
        }
        if let Some(shards) = self.shards {
            target["shards"] = json!(shards);
        }
        target
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use serde_json::json;

    use crate::cli::{Cli, Command, JobCommand};

    fn add(args: &[&str]) -> serde_json::Value {
        let argv = [
            "chimectl", "job", "add", "--name", "n", "--every", "1m", "--group", "g",
        ];
        let cli = Cli::try_parse_from(argv.iter().chain(args)).unwrap();
        let Command::Job(JobCommand::Add(add)) = cli.command else {
            panic!("parsed as job add")
        };
        add.to_request().unwrap()
    }

    #[test]
    fn delivery_flags_go_into_the_target() {
        assert_eq!(add(&[])["target"], json!({"group": "g"}));
        assert_eq!(
            add(&["--mode", "sharded", "--shards", "8"])["target"],
            json!({"group": "g", "mode": "sharded", "shards": 8})
        );
        assert_eq!(
            add(&["--mode", "zone", "--zones", "dc1,dc2"])["target"],
            json!({"group": "g", "mode": "zone", "zones": ["dc1", "dc2"]})
        );
        assert_eq!(
            add(&["--mode", "broadcast"])["target"],
            json!({"group": "g", "mode": "broadcast"})
        );
        // Validation is the server's: a mismatch is passed on as given.
        assert_eq!(
            add(&["--shards", "0"])["target"],
            json!({"group": "g", "shards": 0})
        );
    }
}
