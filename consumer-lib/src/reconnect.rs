//! The loop the consumer and the observer both run: open a session on the broker, consume
//! until shutdown or until the session is lost, and reconnect with backoff. A broker
//! failure never ends a run; only shutdown does, after the running handlers drained.
//!
//! What differs between the two (how a session opens, consumes and drains, what they
//! log and count) is the [`Supervised`] implementation in `consumer/session.rs` and
//! `observer/session.rs`; the order of those steps, the backoff and the final drain are
//! written once, here.

use std::{fmt, future::Future, time::Duration};

use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::backoff::Backoff;

/// Why a session stopped consuming.
pub(crate) enum SessionEnd {
    /// Shutdown was requested.
    Cancelled,
    /// The connection or channel failed.
    Lost(String),
}

/// One kind of broker session (a consumer's or an observer's), as [`supervise`] drives it.
pub(crate) trait Supervised: Sync {
    /// An open session: a connection with its channels and consumers.
    type Session: Send + Sync;
    /// Why a session could not be opened.
    type OpenError: fmt::Display + Send;

    /// Connects, declares what the session consumes and starts consuming.
    fn open(&self) -> impl Future<Output = Result<Self::Session, Self::OpenError>> + Send;

    /// Pulls deliveries, spawning their handling on `in_flight`, until `cancel` or a
    /// broker failure.
    fn consume(
        &self,
        session: &Self::Session,
        in_flight: &TaskTracker,
        cancel: &CancellationToken,
    ) -> impl Future<Output = SessionEnd> + Send;

    /// Stops taking deliveries, lets running handlers finish (up to the drain timeout)
    /// and closes the session.
    fn drain(
        &self,
        session: Self::Session,
        in_flight: &TaskTracker,
    ) -> impl Future<Output = ()> + Send;

    /// How long running handlers may take to finish at shutdown.
    fn drain_timeout(&self) -> Duration;

    /// Logs that a session opened.
    fn opened(&self, session: &Self::Session);

    /// Logs and counts a failed attempt to open a session; the next one is in `delay`.
    fn retrying(&self, error: &Self::OpenError, attempt: u32, delay: Duration);

    /// Logs and counts a lost session; a new one is opened at once.
    fn lost(&self, error: &str);
}

/// Runs sessions of `sessions` one after another until `cancel`: a failed open is retried
/// after a backoff, a lost session is replaced at once, and on shutdown the open session
/// is drained (or, with none open, the handlers still running get the drain timeout).
pub(crate) async fn supervise<S: Supervised>(
    sessions: &S,
    in_flight: &TaskTracker,
    cancel: &CancellationToken,
) {
    let mut backoff = Backoff::default();
    while !cancel.is_cancelled() {
        let opened = tokio::select! {
            opened = sessions.open() => opened,
            () = cancel.cancelled() => break,
        };
        let session = match opened {
            Ok(session) => session,
            Err(error) => {
                let delay = backoff.next_delay();
                sessions.retrying(&error, backoff.attempts(), delay);
                tokio::select! {
                    () = tokio::time::sleep(delay) => continue,
                    () = cancel.cancelled() => break,
                }
            }
        };
        backoff.reset();
        sessions.opened(&session);
        match sessions.consume(&session, in_flight, cancel).await {
            SessionEnd::Cancelled => {
                sessions.drain(session, in_flight).await;
                return;
            }
            SessionEnd::Lost(error) => sessions.lost(&error),
        }
    }
    in_flight.close();
    let _ = tokio::time::timeout(sessions.drain_timeout(), in_flight.wait()).await;
}

/// A token cancelled once `shutdown` completes (awaited on a task of its own).
pub(crate) fn cancel_on<F>(shutdown: F) -> CancellationToken
where
    F: Future<Output = ()> + Send + 'static,
{
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        shutdown.await;
        trigger.cancel();
    });
    cancel
}
