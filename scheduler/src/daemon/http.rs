//! The HTTP API's listener: accepts connections up to a limit, serves each with hyper's
//! HTTP/1 server under a header-read timeout, and stops gracefully.
//!
//! Usage: [`serve`] with the router, the settings and a stop token; [`serve_with_tls`]
//! with the TLS acceptor too when the API is served over HTTPS (see [`super::tls`]).
//!
//! Options ([`HttpSettings`], from `http_header_timeout` and `http_max_connections`):
//! - A connection must deliver a request's complete headers within `header_timeout` of
//!   opening, and of its previous answer (so it is also the keep-alive idle timeout);
//!   otherwise it is closed. 2 000 connections that never finish their headers no longer
//!   hold sockets and memory for ever.
//! - At most `max_connections` are served at once; further connections wait in the
//!   kernel's accept queue (and, once that is full, are refused by the kernel) until one
//!   closes.
//! - Requests have at most [`MAX_HEADERS`] header fields and [`MAX_HEADER_BYTES`] of
//!   head. HTTP-level errors that hyper answers itself (a malformed request line or
//!   header, too many or too large headers, a too-long target) get the API's JSON error
//!   body too: see [`JsonParseErrors`].
//!
//! - Over HTTPS, a connection's TLS handshake runs in the connection's own task under the
//!   same `header_timeout`, so a client that never finishes it cannot hold a connection
//!   slot, and one that fails it never stops the accept loop.
//!
//! Metrics: `chime_http_connections` (open connections),
//! `chime_http_connections_closed_total{reason="header_timeout"|"tls_handshake_timeout"|"tls_handshake_failed"}`.

use std::{
    io,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
    time::Duration,
};

use axum::{Router, http::StatusCode};
use hyper::server::conn::http1;
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    service::TowerToHyperService,
};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::Semaphore,
};
use tokio_rustls::TlsAcceptor;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::{debug, warn};

use crate::{api::error::ApiError, telemetry};

/// Most header fields a request may have (hyper answers 431 beyond).
pub const MAX_HEADERS: usize = 100;
/// Most bytes of request line and headers (hyper answers 431 beyond).
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// How long shutdown waits for requests in progress before it goes on without them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The listener's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpSettings {
    /// Time a connection has to deliver a request's headers, from opening or from its
    /// previous answer. Default 10 s.
    pub header_timeout: Duration,
    /// Connections served at once. Default 1 024.
    pub max_connections: usize,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            max_connections: 1024,
        }
    }
}

/// Serves `router` on `listener` in plain HTTP until `stop` is cancelled, then lets
/// requests in progress finish (idle connections close at once) for up to
/// [`SHUTDOWN_GRACE`].
pub async fn serve(
    listener: TcpListener,
    router: Router,
    settings: HttpSettings,
    stop: CancellationToken,
) {
    serve_with_tls(listener, router, settings, None, stop).await;
}

/// [`serve`], over TLS when `tls` is given: each connection's handshake runs under
/// `settings.header_timeout` before its first request.
pub async fn serve_with_tls(
    listener: TcpListener,
    router: Router,
    settings: HttpSettings,
    tls: Option<TlsAcceptor>,
    stop: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(settings.max_connections.max(1)));
    let connections = TaskTracker::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_timeout)
        .max_headers(MAX_HEADERS)
        .max_header_size(MAX_HEADER_BYTES)
        .max_buf_size(MAX_HEADER_BYTES.max(8192) * 2);
    let builder = Arc::new(builder);
    loop {
        let slot = tokio::select! {
            () = stop.cancelled() => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(error) => {
                    // Out of file descriptors or a connection reset before accept: back
                    // off a moment rather than spin, and keep serving.
                    warn!(%error, "http accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            builder: builder.clone(),
            router: router.clone(),
            stop: stop.clone(),
        };
        let tls = tls.clone();
        let handshake_timeout = settings.header_timeout;
        connections.spawn(async move {
            let _slot = slot;
            let _open = OpenConnection::new();
            match tls {
                None => connection.serve(stream).await,
                Some(tls) => {
                    if let Some(stream) =
                        handshake(&tls, stream, handshake_timeout, &connection.stop).await
                    {
                        connection.serve(stream).await;
                    }
                }
            }
        });
    }
    connections.close();
    if tokio::time::timeout(SHUTDOWN_GRACE, connections.wait())
        .await
        .is_err()
    {
        warn!(
            open = connections.len(),
            "http requests still in progress at shutdown; leaving them"
        );
    }
}

/// Runs a new connection's TLS handshake for at most `timeout` (or until `stop`): the
/// encrypted stream, or `None` when it failed, stalled or chimed is stopping.
async fn handshake(
    tls: &TlsAcceptor,
    stream: TcpStream,
    timeout: Duration,
    stop: &CancellationToken,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    let outcome = tokio::select! {
        () = stop.cancelled() => return None,
        outcome = tokio::time::timeout(timeout, tls.accept(stream)) => outcome,
    };
    let reason = match outcome {
        Ok(Ok(stream)) => return Some(stream),
        Ok(Err(error)) => {
            // Scanners, plain-HTTP clients and clients that do not trust the
            // certificate all end here: routine, so not above debug.
            debug!(%error, "https handshake failed");
            "tls_handshake_failed"
        }
        Err(_) => "tls_handshake_timeout",
    };
    metrics::counter!(telemetry::HTTP_CONNECTIONS_CLOSED, "reason" => reason).increment(1);
    None
}

/// What serving one connection needs.
struct Connection {
    builder: Arc<http1::Builder>,
    router: Router,
    stop: CancellationToken,
}

impl Connection {
    /// Serves HTTP/1 on `stream` until the client closes it, a timeout closes it, or
    /// `stop` asks for a graceful end.
    async fn serve<S>(self, stream: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let connection = self.builder.serve_connection(
            TokioIo::new(JsonParseErrors::new(stream)),
            TowerToHyperService::new(self.router),
        );
        tokio::pin!(connection);
        let served = tokio::select! {
            served = connection.as_mut() => served,
            () = self.stop.cancelled() => {
                connection.as_mut().graceful_shutdown();
                connection.await
            }
        };
        if let Err(error) = served {
            if error.is_timeout() {
                metrics::counter!(telemetry::HTTP_CONNECTIONS_CLOSED, "reason" => "header_timeout")
                    .increment(1);
            }
            debug!(%error, "http connection ended with an error");
        }
    }
}

/// Counts an open connection in `chime_http_connections` while it lives.
struct OpenConnection;

impl OpenConnection {
    fn new() -> Self {
        metrics::gauge!(telemetry::HTTP_CONNECTIONS).increment(1.0);
        Self
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        metrics::gauge!(telemetry::HTTP_CONNECTIONS).decrement(1.0);
    }
}

/// A connection's stream that replaces the bare error answers hyper writes by itself
/// for a request it cannot parse (400, 414, 431, with an empty body) with the API's
/// JSON error and `connection: close`. The API's own error answers always carry a JSON
/// body, so an empty-bodied 400/414/431 head can only come from hyper.
pub struct JsonParseErrors<S> {
    inner: S,
    /// A replacement answer still to write, and how much of it is written.
    pending: Vec<u8>,
    written: usize,
}

impl<S> JsonParseErrors<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            pending: Vec::new(),
            written: 0,
        }
    }
}

impl<S: AsyncWrite + Unpin> JsonParseErrors<S> {
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n =
                ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

/// The JSON answer that replaces hyper's bare answer `head`, if it is one.
fn replacement(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let status = text.strip_prefix("HTTP/1.1 ")?.get(..3)?;
    let status = match status {
        "400" => StatusCode::BAD_REQUEST,
        "414" => StatusCode::URI_TOO_LONG,
        "431" => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        _ => return None,
    };
    let lower = text.to_ascii_lowercase();
    if !lower.ends_with("\r\n\r\n") || !lower.contains("\r\ncontent-length: 0\r\n") {
        return None;
    }
    let body = serde_json::json!({ "error": ApiError::for_status(status) }).to_string();
    Some(
        format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            status.as_str(),
            status.canonical_reason().unwrap_or_default(),
            body.len()
        )
        .into_bytes(),
    )
}

impl<S: AsyncRead + Unpin> AsyncRead for JsonParseErrors<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for JsonParseErrors<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        // hyper writes a whole head in one call (this stream is not vectored).
        if buf.len() <= 1024
            && let Some(answer) = replacement(buf)
        {
            self.pending = answer;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bare_parse_error_answers_are_replaced() {
        let bare = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: Fri, 27 Nov 2026 07:00:00 GMT\r\n\r\n";
        let answer = String::from_utf8(replacement(bare).unwrap()).unwrap();
        assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
        assert!(answer.contains("connection: close"), "{answer}");
        let (_, body) = answer.split_once("\r\n\r\n").unwrap();
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["error"]["code"], "headers_too_large");
        let bad = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n";
        let answer = String::from_utf8(replacement(bad).unwrap()).unwrap();
        assert!(answer.contains("\"bad_request\""), "{answer}");
        // The API's own answers have bodies; other statuses are left alone.
        let own = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 80\r\n\r\n";
        assert_eq!(replacement(own), None);
        assert_eq!(
            replacement(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n"),
            None
        );
    }
}
