//! The web console: a browser client of the `/v1` API, served by `chimed` on the API's
//! port. `/` answers the console's page and `/console/<file>` its scripts and styles, all
//! embedded in the binary ([`assets`]), so there is nothing to deploy and no request
//! leaves the operator's network.
//!
//! The console holds no data and no logic of its own: it signs in with an API token,
//! which it keeps in the tab's session storage and sends as `Authorization: Bearer` to
//! the API, and the API decides what the token may see and do. So its files answer
//! without a token, like a login page: they are the same for everyone and carry nothing
//! but code. Every answer forbids framing and any script, style or connection from
//! elsewhere (a strict `Content-Security-Policy`).
//!
//! The files are plain JavaScript modules, CSS and HTML written by hand: building
//! `chimed` needs no JavaScript toolchain, and what runs in the browser is what is in
//! the repository.

mod assets;

use axum::{
    Router,
    extract::Path,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};

pub use assets::{ASSETS, Asset};

/// Where the console's files are served, below the page itself at `/`.
pub const ASSET_PREFIX: &str = "/console/";

/// The policy every console answer carries: only this origin's scripts, styles, images
/// and API; no framing, no plugins, no forms posting elsewhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; \
     manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The console's routes: `/` and `/console/{*file}`.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/console/{*file}", get(file))
}

async fn index(headers: HeaderMap) -> Response {
    serve(assets::find("index.html"), &headers)
}

async fn file(Path(file): Path<String>, headers: HeaderMap) -> Response {
    // index.html is only ever `/`, so the page has one address.
    let asset = assets::find(&file).filter(|asset| asset.path != "index.html");
    serve(asset, &headers)
}

fn serve(asset: Option<&'static Asset>, request: &HeaderMap) -> Response {
    let Some(asset) = asset else {
        let mut response = (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "no such console file\n",
        )
            .into_response();
        secure(response.headers_mut());
        return response;
    };
    let etag = asset.etag();
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|tag| tag.trim() == etag));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, asset.content_type)], asset.body).into_response()
    };
    let headers = response.headers_mut();
    secure(headers);
    if let Ok(value) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, value);
    }
    // Revalidate every time (a 304 is cheap): a new chimed must never run an old script.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

fn secure(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::{Body, to_bytes};
    use axum::http::Request;
    use tower::ServiceExt;

    async fn get(path: &str, etag: Option<&str>) -> Response {
        let mut request = Request::get(path);
        if let Some(etag) = etag {
            request = request.header(header::IF_NONE_MATCH, etag);
        }
        router::<()>()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn the_page_and_every_file_answer_with_their_type_and_policy() {
        let page = get("/", None).await;
        assert_eq!(page.status(), StatusCode::OK);
        assert_eq!(
            page.headers()[header::CONTENT_TYPE],
            "text/html; charset=utf-8"
        );
        assert_eq!(
            page.headers()[header::CONTENT_SECURITY_POLICY],
            CONTENT_SECURITY_POLICY
        );
        let html = to_bytes(page.into_body(), usize::MAX).await.unwrap();
        assert!(String::from_utf8_lossy(&html).contains("/console/js/app.js"));
        for asset in ASSETS.iter().filter(|asset| asset.path != "index.html") {
            let response = get(&format!("{ASSET_PREFIX}{}", asset.path), None).await;
            assert_eq!(response.status(), StatusCode::OK, "{}", asset.path);
            assert_eq!(response.headers()[header::CONTENT_TYPE], asset.content_type);
            assert_eq!(response.headers()[header::X_FRAME_OPTIONS], "DENY");
            let body = to_bytes(response.into_body(), usize::MAX).await.unwrap();
            assert_eq!(&body[..], asset.body);
        }
    }

    #[tokio::test]
    async fn a_known_etag_answers_not_modified() {
        let first = get("/console/js/app.js", None).await;
        let etag = first.headers()[header::ETAG].to_str().unwrap().to_string();
        let again = get("/console/js/app.js", Some(&etag)).await;
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        let other = get("/console/js/app.js", Some("\"nope\"")).await;
        assert_eq!(other.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn unknown_files_and_escapes_are_not_found() {
        for path in [
            "/console/nope.js",
            "/console/../Cargo.toml",
            "/console/%2e%2e/mod.rs",
            "/console/index.html",
            "/console/js",
        ] {
            let response = get(path, None).await;
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
            assert_eq!(
                response.headers()[header::CONTENT_SECURITY_POLICY],
                CONTENT_SECURITY_POLICY
            );
        }
    }
}
