//! Progress lines on stderr for long steps, at most one every two seconds.

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

/// Rate-limited progress for one step.
#[derive(Debug)]
pub struct Progress {
    label: String,
    last: Mutex<Option<Instant>>,
}

const EVERY: Duration = Duration::from_secs(2);

impl Progress {
    /// Progress of the step `label`.
    pub fn new(label: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            last: Mutex::new(None),
        }
    }

    /// Prints `line()` if the last line is older than two seconds.
    pub fn show(&self, line: impl FnOnce() -> String) {
        let mut last = self.last.lock().expect("progress");
        if last.is_none_or(|at| at.elapsed() >= EVERY) {
            *last = Some(Instant::now());
            eprintln!("[bench] {}: {}", self.label, line());
        }
    }

    /// Prints a line now.
    pub fn say(&self, line: &str) {
        eprintln!("[bench] {}: {line}", self.label);
    }
}
