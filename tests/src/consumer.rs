//! The test consumer process (`chime-test-consumer`, built on `chime-consumer`) and the
//! events it reports: one JSON line per handler start and finish.

use std::{
    path::PathBuf,
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use serde_json::Value;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};

use crate::{binaries, chimed, wait};

/// A running test consumer.
pub struct TestConsumer {
    child: Child,
    events: Arc<Mutex<Vec<Value>>>,
    /// Its instance id.
    pub instance: String,
    log: PathBuf,
}

impl TestConsumer {
    /// Starts a consumer of `group` with instance id `instance`. Extra arguments are passed
    /// to `chime-test-consumer` (see its `--help`).
    pub async fn start(amqp_url: &str, group: &str, instance: &str, extra: &[&str]) -> Self {
        let log = binaries::scratch_dir("consumer").join(format!("{instance}.log"));
        let mut command = Command::new(binaries::binary("chime-test-consumer"));
        command
            .args([
                "--amqp-url",
                amqp_url,
                "--group",
                group,
                "--instance",
                instance,
            ])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("consumer log"))
            .kill_on_drop(true);
        let mut child = command.spawn().expect("start chime-test-consumer");
        let stdout = child.stdout.take().expect("piped stdout");
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(event) = serde_json::from_str::<Value>(&line) {
                    sink.lock().expect("events").push(event);
                }
            }
        });
        Self {
            child,
            events,
            instance: instance.to_string(),
            log,
        }
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<Value> {
        self.events.lock().expect("events").clone()
    }

    /// Events of kind `event` (`started`, `finished`).
    pub fn events_of(&self, event: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["event"] == event)
            .collect()
    }

    /// Waits until `check` holds for the events.
    pub async fn wait_for(&self, what: &str, timeout: Duration, check: impl Fn(&[Value]) -> bool) {
        let events = self.events.clone();
        let log = self.log.clone();
        wait::until(
            &format!("{what} (consumer log: {})", log.display()),
            timeout,
            || {
                let ok = check(&events.lock().expect("events"));
                async move { ok.then_some(()) }
            },
        )
        .await;
    }

    /// Waits for the process to exit by itself.
    pub async fn wait_exit(&mut self) -> std::process::ExitStatus {
        self.child.wait().await.expect("wait for consumer")
    }

    /// Sends it a signal by name (`STOP`, `CONT`, ...).
    pub fn signal(&self, sig: &str) {
        chimed::signal(&self.child, sig);
    }

    /// Kills it with SIGKILL.
    pub async fn kill(mut self) {
        chimed::signal(&self.child, "KILL");
        let _ = self.child.wait().await;
    }

    /// Stops it with SIGTERM and waits.
    pub async fn stop(mut self) -> std::process::ExitStatus {
        chimed::signal(&self.child, "TERM");
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("consumer exits within 30 s")
            .expect("wait for consumer")
    }
}
