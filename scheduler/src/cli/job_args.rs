//! `chimectl job add`: a job from flags, or from a JSON file as the API takes it.

use std::{io::Read, path::PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Map, Value, json};

/// Flags of `job add`. Either `--file` or `--name`, a schedule and `--group`.
#[derive(Debug, Args)]
pub struct AddArgs {
    /// The job as JSON (as `POST /v1/jobs` takes it); `-` reads standard input.
    #[arg(short, long, conflicts_with_all = ["name", "cron", "every", "at", "group"])]
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
        body.insert("target".into(), json!({"group": group}));
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
}
