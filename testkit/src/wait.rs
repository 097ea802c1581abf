//! Waiting on conditions with a deadline: tests wait on what they expect to happen,
//! never on a fixed sleep.

use std::{future::Future, time::Duration};

/// A deadline that suits one condition inside a single process (a broker round trip, a
/// consumer starting); scenarios across processes pass their own.
pub const WAIT: Duration = Duration::from_secs(10);

/// How often a condition is checked again.
const POLL: Duration = Duration::from_millis(50);

/// Polls `check` every 50 ms until it returns `Some`, or panics after `timeout` saying
/// what was awaited.
pub async fn until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// [`until`] with the [`WAIT`] deadline.
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    until(what, WAIT, check).await
}

/// Receives the next value from `rx` within [`WAIT`], or panics saying what was awaited.
pub async fn receive<T>(what: &str, rx: &mut tokio::sync::mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap_or_else(|_| panic!("timed out after {WAIT:?} waiting for {what}"))
        .expect("sender alive")
}
