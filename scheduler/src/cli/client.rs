//! A small typed client of chimed's HTTP API, over HTTP or HTTPS (rustls, trusting the
//! system's roots or only the CAs of `--ca-file`).

use std::path::Path;

use reqwest::{Method, StatusCode};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use uuid::Uuid;

use crate::api::dto::{
    BatchRefusal, DlqItems, DlqMessage, DlqSummary, JobBatchResponse, JobListQuery, JobResponse,
    ListResponse, PurgeResponse, ReplayReport, ReplayRequest,
};

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an API error.
    #[error("{code}{}: {message}", field.as_deref().map(|f| format!(" ({f})")).unwrap_or_default())]
    Api {
        /// HTTP status.
        status: StatusCode,
        /// The API's error code.
        code: String,
        /// The API's message.
        message: String,
        /// The field at fault.
        field: Option<String>,
    },
    /// The server address is not an `http://` or `https://` URL.
    #[error("{0}")]
    BadServer(String),
    /// Nothing listens at the server's address.
    #[error("connection refused: is chimed running at {server}? set --server or CHIME_SERVER")]
    Refused {
        /// The server.
        server: String,
    },
    /// The server could not be reached, or stopped answering.
    #[error("cannot reach chimed at {server}: {reason} (check --server or CHIME_SERVER)")]
    Transport {
        /// The server.
        server: String,
        /// Why.
        reason: String,
    },
    /// Something answered that does not speak chimed's API.
    #[error(
        "{server} answered {what}, which is not chimed's API: is --server (or CHIME_SERVER) the address of chimed?"
    )]
    NotChimed {
        /// The server.
        server: String,
        /// What it answered.
        what: String,
    },
    /// The `--ca-file` cannot be used.
    #[error("cannot use the CA file {path} (--ca-file or CHIME_CA_FILE): {reason}")]
    CaFile {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The server's certificate did not verify: nothing was sent.
    #[error("certificate not trusted: {server} presented a certificate {reason}; {hint}")]
    Untrusted {
        /// The server.
        server: String,
        /// What is wrong with the certificate.
        reason: String,
        /// What to do about it.
        hint: &'static str,
    },
    /// No job matches the name.
    #[error("no job named {0:?} (give a job id, app/name, or a name in app \"default\")")]
    UnknownJob(String),
}

/// A batch of jobs the API refused ([`Client::create_jobs`]): nothing of it was stored.
#[derive(Debug)]
pub struct BatchRefused {
    /// The API's error (the first refused job's, or the request's as a whole).
    pub error: ClientError,
    /// The refused jobs the API listed (none when the request as a whole was refused).
    pub refusal: BatchRefusal,
    /// The answer's body as sent, for `--json`.
    pub body: Value,
}

/// The API client.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    http: reqwest::Client,
    /// The API token sent as `Authorization: Bearer`, if any.
    token: Option<String>,
}

/// How long one request may take.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl Client {
    /// A client of the server at `base` (e.g. `http://127.0.0.1:8080`); over `https://` it
    /// trusts the system's root certificates.
    pub fn new(base: &str) -> Result<Self, ClientError> {
        Self::with_ca_file(base, None)
    }

    /// A client of the server at `base` that, given `ca_file` (PEM, one or more CA
    /// certificates), trusts only those CAs for `https://`; without it, the system's
    /// roots. A certificate that does not verify is an error, never a fallback.
    pub fn with_ca_file(base: &str, ca_file: Option<&Path>) -> Result<Self, ClientError> {
        let base = check_server(base)?;
        // reqwest builds its TLS set-up with the process's rustls provider: ring, the
        // only one compiled in (an error means one is installed already).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder().timeout(REQUEST_TIMEOUT);
        if let Some(path) = ca_file {
            builder = builder.tls_certs_only(read_ca_file(path)?);
        }
        let http = builder.build().map_err(|e| ClientError::Transport {
            server: base.clone(),
            reason: e.to_string(),
        })?;
        Ok(Self {
            base,
            http,
            token: None,
        })
    }

    /// The same client, sending `token` with every request.
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token;
        self
    }

    /// GET `path`.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.send(Method::GET, path, None::<&Value>).await
    }

    /// POST `body` to `path`.
    pub async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: Option<&Value>,
    ) -> Result<T, ClientError> {
        self.send(Method::POST, path, body).await
    }

    /// DELETE `path`.
    pub async fn delete(&self, path: &str) -> Result<(), ClientError> {
        self.send::<Value>(Method::DELETE, path, None::<&Value>)
            .await
            .map(|_| ())
    }

    /// PATCH `body` to `path`, naming the version the change is based on (`If-Match`).
    pub async fn patch<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
        version: Option<i64>,
    ) -> Result<T, ClientError> {
        let mut request = self.request(Method::PATCH, path).json(body);
        if let Some(version) = version {
            request = request.header(reqwest::header::IF_MATCH, format!("\"{version}\""));
        }
        self.exchange(request).await
    }

    async fn send<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T, ClientError> {
        let mut request = self.request(method, path);
        if let Some(body) = body {
            request = request.json(body);
        }
        self.exchange(request).await
    }

    /// A request for `method path`, carrying the token if there is one.
    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Sends `request` and reads the answer: the decoded body, the API's error, or what
    /// went wrong on the way.
    async fn exchange<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        let response = request.send().await.map_err(|e| self.transport(&e))?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| self.transport(&e))?;
        if !status.is_success() {
            return Err(api_error(&self.base, status, &bytes));
        }
        let bytes = if bytes.is_empty() {
            &b"null"[..]
        } else {
            &bytes[..]
        };
        serde_json::from_slice(bytes).map_err(|e| ClientError::NotChimed {
            server: self.base.clone(),
            what: format!("HTTP {status} with a body that does not fit ({e})"),
        })
    }

    /// What a failed exchange means to the user.
    fn transport(&self, error: &reqwest::Error) -> ClientError {
        let server = self.base.clone();
        if error.is_connect() && io_kind(error) == Some(std::io::ErrorKind::ConnectionRefused) {
            return ClientError::Refused { server };
        }
        if let Some(tls) = tls_error(error) {
            return tls_failure(server, tls);
        }
        let reason = if error.is_timeout() {
            format!("no answer within {}s", REQUEST_TIMEOUT.as_secs())
        } else if server.starts_with("http://") && !error.is_connect() {
            // An HTTPS listener answers a plain request with a TLS alert or not at all.
            format!(
                "{} (if chimed serves HTTPS, write https:// in --server)",
                root_cause(error)
            )
        } else {
            root_cause(error)
        };
        ClientError::Transport { server, reason }
    }

    /// Every job `query` asks for (its filters and order), following cursors, at most
    /// `limit`. A bad filter is the server's to refuse (it names it).
    pub async fn all_jobs(
        &self,
        query: &JobListQuery,
        limit: Option<usize>,
    ) -> Result<Vec<JobResponse>, ClientError> {
        let mut jobs = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut path = "/v1/jobs?limit=1000".to_string();
            let params = [
                ("app", &query.app),
                ("group", &query.group),
                ("mode", &query.mode),
                ("paused", &query.paused),
                ("q", &query.q),
                ("sort", &query.sort),
                ("cursor", &cursor),
            ];
            for (name, value) in params {
                if let Some(value) = value {
                    path.push_str(&format!("&{name}={}", segment(value)));
                }
            }
            let page: ListResponse<JobResponse> = self.get(&path).await?;
            jobs.extend(page.items);
            if limit.is_some_and(|l| jobs.len() >= l) {
                jobs.truncate(limit.unwrap_or(usize::MAX));
                return Ok(jobs);
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => return Ok(jobs),
            }
        }
    }

    /// The id of the job named by `reference`: an id, `app/name`, or a name in `default`.
    pub async fn resolve_job(&self, reference: &str) -> Result<Uuid, ClientError> {
        if let Ok(id) = Uuid::parse_str(reference) {
            return Ok(id);
        }
        let (app, name) = reference.split_once('/').unwrap_or(("default", reference));
        let query = JobListQuery {
            app: Some(app.to_string()),
            ..JobListQuery::default()
        };
        self.all_jobs(&query, None)
            .await?
            .into_iter()
            .find(|job| job.spec.name == name)
            .map(|job| job.id)
            .ok_or_else(|| ClientError::UnknownJob(reference.to_string()))
    }

    /// The job named by `reference` (see [`Client::resolve_job`]), as it is now.
    pub async fn find_job(&self, reference: &str) -> Result<JobResponse, ClientError> {
        let id = self.resolve_job(reference).await?;
        self.get(&format!("/v1/jobs/{id}")).await
    }

    /// Creates `jobs` (each as `POST /v1/jobs` takes one) in one `POST /v1/jobs/batch`,
    /// all or none. A refusal by the API comes back with its list of refused jobs; any
    /// other failure (unreachable server) is the outer error.
    pub async fn create_jobs(
        &self,
        jobs: &[Value],
    ) -> Result<Result<JobBatchResponse, BatchRefused>, ClientError> {
        let request = self
            .request(Method::POST, "/v1/jobs/batch")
            .json(&serde_json::json!({ "jobs": jobs }));
        let response = request.send().await.map_err(|e| self.transport(&e))?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| self.transport(&e))?;
        if status.is_success() {
            return serde_json::from_slice(&bytes)
                .map(Ok)
                .map_err(|e| ClientError::NotChimed {
                    server: self.base.clone(),
                    what: format!("HTTP {status} with a body that does not fit ({e})"),
                });
        }
        let error = api_error(&self.base, status, &bytes);
        if matches!(error, ClientError::NotChimed { .. }) {
            return Err(error);
        }
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let refusal = serde_json::from_value(body.clone()).unwrap_or_default();
        Ok(Err(BatchRefused {
            error,
            refusal,
            body,
        }))
    }

    /// Every dead-letter queue, with depth, oldest age and reasons.
    pub async fn dlq_list(&self) -> Result<Vec<DlqSummary>, ClientError> {
        let list: DlqItems<DlqSummary> = self.get("/v1/dlq").await?;
        Ok(list.items)
    }

    /// Up to `limit` messages at the head of dead-letter queue `queue`, left in place.
    pub async fn dlq_peek(
        &self,
        queue: &str,
        limit: usize,
    ) -> Result<Vec<DlqMessage>, ClientError> {
        let list: DlqItems<DlqMessage> = self
            .get(&format!(
                "/v1/dlq/{}/messages?limit={limit}",
                segment(queue)
            ))
            .await?;
        Ok(list.items)
    }

    /// One replay request: up to `request.limit` messages of `queue`.
    pub async fn dlq_replay(
        &self,
        queue: &str,
        request: &ReplayRequest,
    ) -> Result<ReplayReport, ClientError> {
        let body = serde_json::to_value(request).expect("a replay request serialises");
        self.post(&format!("/v1/dlq/{}/replay", segment(queue)), Some(&body))
            .await
    }

    /// Empties dead-letter queue `queue`.
    pub async fn dlq_purge(&self, queue: &str) -> Result<PurgeResponse, ClientError> {
        self.post(&format!("/v1/dlq/{}/purge", segment(queue)), None)
            .await
    }
}

/// `server` as a base URL without a trailing slash, or why it is not one chimectl can use.
fn check_server(server: &str) -> Result<String, ClientError> {
    let server = server.trim().trim_end_matches('/');
    let Some((scheme, rest)) = server.split_once("://") else {
        return Err(ClientError::BadServer(format!(
            "server address {server:?} has no scheme: write http://{server} (set by --server or CHIME_SERVER)"
        )));
    };
    if !matches!(scheme, "http" | "https") {
        return Err(ClientError::BadServer(format!(
            "server address {server:?} must start with http:// or https://, not {scheme}:// (set by --server or CHIME_SERVER)"
        )));
    }
    if rest.is_empty() || reqwest::Url::parse(server).is_err() {
        return Err(ClientError::BadServer(format!(
            "server address {server:?} is not a URL such as http://127.0.0.1:8080 (set by --server or CHIME_SERVER)"
        )));
    }
    Ok(server.to_string())
}

/// The CA certificates in the PEM file `path`.
fn read_ca_file(path: &Path) -> Result<Vec<reqwest::Certificate>, ClientError> {
    let failed = |reason: String| ClientError::CaFile {
        path: path.display().to_string(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| failed(e.to_string()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem)
        .map_err(|_| failed("not a PEM certificate bundle".to_string()))?;
    if certs.is_empty() {
        return Err(failed(
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_string(),
        ));
    }
    Ok(certs)
}

/// The rustls error somewhere in `error`'s chain (an I/O error carries it inside).
fn tls_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = source {
        if let Some(tls) = error.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        // An io::Error's source() skips the error it wraps: look at that one too.
        if let Some(inner) = error
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| tls_error(inner))
        {
            return Some(inner);
        }
        source = error.source();
    }
    None
}

/// What a failed TLS handshake with `server` means to the user.
fn tls_failure(server: String, error: &rustls::Error) -> ClientError {
    use rustls::CertificateError as Cert;
    let untrusted = |reason: String, hint| ClientError::Untrusted {
        server: server.clone(),
        reason,
        hint,
    };
    match error {
        rustls::Error::InvalidCertificate(
            Cert::NotValidForName | Cert::NotValidForNameContext { .. },
        ) => untrusted(
            "that does not name the host in --server".to_string(),
            "use a host name (or IP address) the certificate was issued for",
        ),
        rustls::Error::InvalidCertificate(
            Cert::Expired | Cert::ExpiredContext { .. } | Cert::NotValidYet | Cert::NotValidYetContext { .. },
        ) => untrusted(
            "that has expired or is not valid yet".to_string(),
            "renew chimed's certificate (or check the clocks)",
        ),
        rustls::Error::InvalidCertificate(other) => untrusted(
            format!("not issued by a CA chimectl trusts ({other:?})"),
            "use --ca-file FILE (or CHIME_CA_FILE) with the certificate of the CA that issued it",
        ),
        rustls::Error::InvalidMessage(_) => {
            ClientError::Transport {
                server,
                reason: "the server does not speak TLS (if chimed serves plain HTTP, write http:// in --server)".to_string(),
            }
        }
        other => ClientError::Transport {
            server,
            reason: format!("TLS handshake failed: {other}"),
        },
    }
}

/// The API error in a non-2xx answer, or [`ClientError::NotChimed`] when the body is not
/// one (another HTTP server answered).
fn api_error(server: &str, status: StatusCode, body: &[u8]) -> ClientError {
    let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let error = &parsed["error"];
    let Some(code) = error["code"].as_str() else {
        return ClientError::NotChimed {
            server: server.to_string(),
            what: format!("HTTP {status} without a Chime error"),
        };
    };
    let mut message = error["message"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| format!("HTTP {status}"));
    if status == StatusCode::UNAUTHORIZED {
        message.push_str(
            " (chimectl sends the token from --token-file, CHIME_TOKEN_FILE, CHIME_TOKEN, \
             or ./chime-admin.token)",
        );
    }
    ClientError::Api {
        status,
        code: code.to_string(),
        message,
        field: error["field"].as_str().map(str::to_string),
    }
}

/// The kind of the I/O error at the bottom of `error`, if there is one.
fn io_kind(error: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = source {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        source = error.source();
    }
    None
}

/// The innermost message of `error`: the useful part ("dns error: failed to lookup
/// address ...") rather than reqwest's "error sending request for url".
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut innermost = error;
    while let Some(source) = innermost.source() {
        innermost = source;
    }
    innermost.to_string()
}

/// `text` as one URL path segment: everything but unreserved characters percent-encoded.
fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_addresses_need_an_http_scheme() {
        assert_eq!(
            check_server("http://127.0.0.1:8080/").unwrap(),
            "http://127.0.0.1:8080"
        );
        assert!(check_server("https://chime.example.com").is_ok());
        let no_scheme = check_server("localhost:8080").unwrap_err().to_string();
        assert!(
            no_scheme.contains("has no scheme: write http://localhost:8080"),
            "{no_scheme}"
        );
        let wrong = check_server("amqp://127.0.0.1:5672")
            .unwrap_err()
            .to_string();
        assert!(wrong.contains("http:// or https://"), "{wrong}");
        assert!(check_server("http://").is_err());
    }

    #[test]
    fn an_answer_without_a_chime_error_is_not_chimed() {
        let html = api_error("http://x", StatusCode::NOT_FOUND, b"<html>nope</html>");
        assert!(matches!(html, ClientError::NotChimed { .. }), "{html}");
        assert!(html.to_string().contains("not chimed's API"), "{html}");
        let api = api_error(
            "http://x",
            StatusCode::NOT_FOUND,
            br#"{"error": {"code": "not_found", "message": "no job", "field": null}}"#,
        );
        assert_eq!(api.to_string(), "not_found: no job");
    }

    #[tokio::test]
    async fn an_unknown_host_names_the_lookup_failure() {
        let client = Client::new("http://chimed.invalid:8080").unwrap();
        let error = client.get::<Value>("/v1/jobs").await.unwrap_err();
        let text = error.to_string();
        assert!(
            text.starts_with("cannot reach chimed at http://chimed.invalid:8080: ")
                && !text.contains("error sending request"),
            "{text}"
        );
    }

    #[test]
    fn a_ca_file_that_is_missing_or_not_pem_is_named() {
        let dir = std::env::temp_dir().join(format!("chime-ca-{}", Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.crt");
        let error = Client::with_ca_file("https://127.0.0.1:8443", Some(&missing))
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with(&format!(
                "cannot use the CA file {} (--ca-file or CHIME_CA_FILE): ",
                missing.display()
            )),
            "{error}"
        );
        let text = dir.join("text.crt");
        std::fs::write(&text, "not a certificate\n").unwrap();
        let error = Client::with_ca_file("https://127.0.0.1:8443", Some(&text))
            .unwrap_err()
            .to_string();
        assert!(error.contains("holds no PEM certificate"), "{error}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn certificate_failures_say_what_to_do() {
        use rustls::CertificateError;
        let server = || "https://chimed:8443".to_string();
        let unknown = tls_failure(
            server(),
            &rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
        )
        .to_string();
        assert!(
            unknown.starts_with("certificate not trusted: https://chimed:8443 presented")
                && unknown.contains("use --ca-file FILE (or CHIME_CA_FILE)"),
            "{unknown}"
        );
        let name = tls_failure(
            server(),
            &rustls::Error::InvalidCertificate(CertificateError::NotValidForName),
        )
        .to_string();
        assert!(
            name.contains("does not name the host in --server"),
            "{name}"
        );
        let expired = tls_failure(
            server(),
            &rustls::Error::InvalidCertificate(CertificateError::Expired),
        )
        .to_string();
        assert!(expired.contains("has expired"), "{expired}");
        // The rustls error inside an io::Error inside another error is found.
        let wrapped = std::io::Error::other(rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer,
        ));
        assert!(matches!(
            tls_error(&wrapped),
            Some(rustls::Error::InvalidCertificate(_))
        ));
    }

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(segment("chime.group.a-b_c.dlq"), "chime.group.a-b_c.dlq");
        assert_eq!(segment("a/b?c d"), "a%2Fb%3Fc%20d");
    }
}
