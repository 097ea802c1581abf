//! Middleware that keeps the API's error promise at its edges: a handler that panics
//! answers 500 `internal` (and counts in `chime_http_panics_total`) instead of dropping
//! the connection; a path that is not UTF-8 once percent-decoded, or a body sent with a
//! non-JSON `Content-Type`, is refused before routing reaches a handler; and any error
//! response without a JSON body (a framework rejection) is given the documented one.

use std::panic::AssertUnwindSafe;

use axum::{
    body::Body,
    extract::Request,
    http::{HeaderMap, Method, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use futures_util::FutureExt;
use tracing::error;

use super::error::{ApiError, ErrorCode};
use crate::telemetry;

/// Runs the rest of the stack, turning a panic into a JSON 500 and a metric.
pub async fn catch_panics(request: Request, next: Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    match AssertUnwindSafe(next.run(request)).catch_unwind().await {
        Ok(response) => response,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-text panic payload".to_owned());
            error!(%method, path, panic = message, "http handler panicked");
            metrics::counter!(telemetry::HTTP_PANICS).increment(1);
            ApiError::internal().into_response()
        }
    }
}

/// Refuses requests no handler should see: a path that is not UTF-8 once
/// percent-decoded, and a body whose `Content-Type` is present but not JSON.
pub async fn check_request(request: Request, next: Next) -> Response {
    if percent_decode(request.uri().path()).is_none() {
        return ApiError::field(
            ErrorCode::InvalidField,
            "path",
            "the request path is not valid UTF-8 once percent-decoded",
        )
        .into_response();
    }
    if has_body(request.method(), request.headers())
        && let Err(error) = json_content_type(request.headers())
    {
        return error.into_response();
    }
    next.run(request).await
}

/// Reads the whole request body (at most `limit` bytes) before any handler runs, so
/// that every answer leaves the connection ready for the client's next request: a body
/// a handler does not read (a `GET` with a body, an error answered before the body was
/// looked at) would otherwise make hyper close the connection after the answer, without
/// saying so, and the client's next request on it would fail. Over the limit answers
/// 413 `payload_too_large` (and closes the connection).
pub async fn read_whole_body(limit: usize, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    match axum::body::to_bytes(body, limit).await {
        Ok(bytes) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Err(_) => ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("request body is over the limit of {limit} bytes"),
        )
        .into_response(),
    }
}

/// Gives an error response without a JSON body (a framework rejection, such as a path
/// parameter that does not deserialize) the documented JSON error for its status.
pub async fn json_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) || is_json(response.headers()) {
        return response;
    }
    ApiError::for_status(status).into_response()
}

fn has_body(method: &Method, headers: &HeaderMap) -> bool {
    if matches!(*method, Method::GET | Method::HEAD | Method::DELETE) {
        return false;
    }
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    length.is_some_and(|n| n > 0) || headers.contains_key(header::TRANSFER_ENCODING)
}

/// A missing `Content-Type` is read as JSON; a present one must say JSON
/// (`application/json` or `application/<something>+json`, any parameters).
fn json_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let refuse = |shown: &str| {
        ApiError::field(
            ErrorCode::UnsupportedMediaType,
            "Content-Type",
            format!("the body must be JSON (Content-Type: application/json), not {shown:?}"),
        )
    };
    let text = value
        .to_str()
        .map_err(|_| refuse("a value that is not visible ASCII"))?;
    let essence = text
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let json = essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"));
    if json {
        Ok(())
    } else {
        Err(refuse(&text.chars().take(100).collect::<String>()))
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

/// The percent-decoded path, or `None` if it is not UTF-8 (a `%` without two hex
/// digits is kept as it is, as the router reads it).
fn percent_decode(path: &str) -> Option<String> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&hi), Some(&lo)) if hex(hi).is_some() && hex(lo).is_some() => {
                let value = hex(hi).unwrap_or(0) * 16 + hex(lo).unwrap_or(0);
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::{Router, http::StatusCode, middleware::from_fn, routing::get};
    use tower::ServiceExt;

    async fn call(router: Router, request: Request) -> (StatusCode, serde_json::Value) {
        let response = router.oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    fn router() -> Router {
        Router::new()
            .route(
                "/boom",
                get(|| async {
                    if std::hint::black_box(true) {
                        panic!("handler bug");
                    }
                }),
            )
            .route(
                "/echo/{id}",
                get(|axum::extract::Path(id): axum::extract::Path<String>| async move { id })
                    .post(|| async { "ok" }),
            )
            .route(
                "/number/{n}",
                get(
                    |axum::extract::Path(n): axum::extract::Path<u32>| async move { n.to_string() },
                ),
            )
            .layer(from_fn(json_errors))
            .layer(from_fn(check_request))
            .layer(from_fn(catch_panics))
    }

    #[tokio::test]
    async fn a_panic_is_a_json_500_and_counted() {
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let request = Request::get("/boom").body(Body::empty()).unwrap();
        // A current-thread runtime: the handler runs on this thread, under this recorder.
        let _local = metrics::set_default_local_recorder(&recorder);
        let (status, body) = call(router(), request).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body["error"]["code"], "internal");
        assert!(!body.to_string().contains("handler bug"), "{body}");
        let panics: u64 = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == telemetry::HTTP_PANICS)
            .map(|(.., value)| match value {
                metrics_util::debugging::DebugValue::Counter(n) => n,
                _ => 0,
            })
            .sum();
        assert_eq!(panics, 1);
    }

    #[tokio::test]
    async fn bad_paths_and_content_types_are_json_errors() {
        let (status, body) = call(
            router(),
            Request::get("/echo/%FF%FE").body(Body::empty()).unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(
            (&body["error"]["code"], &body["error"]["field"]),
            (&"invalid_field".into(), &"path".into())
        );
        let (status, body) = call(
            router(),
            Request::get("/number/abc").body(Body::empty()).unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body["error"]["code"], "bad_request", "{body}");
        let form = Request::post("/echo/x")
            .header("content-type", "application/x-www-form-urlencoded")
            .header("content-length", "3")
            .body(Body::from("a=b"))
            .unwrap();
        let (status, body) = call(router(), form).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(body["error"]["code"], "unsupported_media_type");
        for fine in [
            "application/json",
            "application/json; charset=utf-8",
            "application/merge-patch+json",
        ] {
            let request = Request::post("/echo/x")
                .header("content-type", fine)
                .header("content-length", "2")
                .body(Body::from("{}"))
                .unwrap();
            let response = router().oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{fine}");
        }
    }

    #[test]
    fn decodes_percent_escapes() {
        assert_eq!(percent_decode("/a%20b").as_deref(), Some("/a b"));
        assert_eq!(percent_decode("/%e2%82%ac").as_deref(), Some("/€"));
        assert_eq!(percent_decode("/100%").as_deref(), Some("/100%"));
        assert_eq!(percent_decode("/%zz").as_deref(), Some("/%zz"));
        assert_eq!(percent_decode("/%c3"), None);
    }
}
