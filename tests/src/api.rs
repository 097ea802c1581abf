//! Raw HTTP calls to chimed, returning status and JSON so tests can assert on both.

use reqwest::{Method, StatusCode};
use serde_json::Value;

/// A client of one chimed's API.
#[derive(Debug, Clone)]
pub struct Api {
    base: String,
    http: reqwest::Client,
    /// The API token sent as `Authorization: Bearer`, if any.
    token: Option<String>,
}

impl Api {
    /// A client of `base` (`http://host:port`).
    pub fn new(base: impl Into<String>) -> Self {
        // reqwest builds its TLS set-up with the process's rustls provider (ring).
        chime_scheduler::daemon::tls::install_crypto_provider();
        Self::with_client(base, reqwest::Client::new())
    }

    /// A client of `base` through `http` (e.g. one that trusts a test CA for `https://`).
    pub fn with_client(base: impl Into<String>, http: reqwest::Client) -> Self {
        Self {
            base: base.into(),
            http,
            token: None,
        }
    }

    /// The same client sending `token` (None: no `Authorization` header).
    pub fn with_token(mut self, token: Option<&str>) -> Self {
        self.token = token.map(str::to_string);
        self
    }

    /// The token this client sends.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends a request; returns the status and the body parsed as JSON (null if empty).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> (StatusCode, Value) {
        self.call_with(method, path, body, &[]).await
    }

    /// Like [`Api::call`] with extra headers.
    pub async fn call_with(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> (StatusCode, Value) {
        let mut request = self.request(method, path);
        if let Some(body) = body {
            request = request.json(body);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.expect("chimed answers");
        let status = response.status();
        let bytes = response.bytes().await.expect("response body");
        let json = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        (status, json)
    }

    /// Sends raw bytes as the body.
    pub async fn call_raw(&self, method: Method, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
        let response = self
            .request(method, path)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("chimed answers");
        let status = response.status();
        let json = response.json().await.unwrap_or(Value::Null);
        (status, json)
    }

    /// Creates a job; panics unless the API answers 201.
    pub async fn create_job(&self, job: Value) -> Value {
        let (status, body) = self.call(Method::POST, "/v1/jobs", Some(&job)).await;
        assert_eq!(status, StatusCode::CREATED, "creating {job}: {body}");
        body
    }

    /// A job's runs (newest first, up to 1000).
    pub async fn runs(&self, job_id: &str) -> Vec<Value> {
        let (status, body) = self
            .call(
                Method::GET,
                &format!("/v1/jobs/{job_id}/runs?limit=1000"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["items"].as_array().cloned().unwrap_or_default()
    }

    /// Fires a job now; returns the manual run.
    pub async fn trigger(&self, job_id: &str) -> Value {
        let (status, run) = self
            .call(Method::POST, &format!("/v1/jobs/{job_id}/trigger"), None)
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{run}");
        run
    }

    /// A run.
    pub async fn run(&self, run_id: &str) -> Value {
        let (status, run) = self
            .call(Method::GET, &format!("/v1/runs/{run_id}"), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{run}");
        run
    }

    /// Waits until run `run_id` satisfies `check`; returns it.
    pub async fn wait_run(
        &self,
        run_id: &str,
        what: &str,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        crate::wait::until(what, std::time::Duration::from_secs(20), || async {
            let run = self.run(run_id).await;
            check(&run).then_some(run)
        })
        .await
    }

    /// A job.
    pub async fn job(&self, job_id: &str) -> Value {
        let (status, body) = self
            .call(Method::GET, &format!("/v1/jobs/{job_id}"), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    /// The Prometheus text of `/metrics`.
    pub async fn metrics(&self) -> String {
        self.request(Method::GET, "/metrics")
            .send()
            .await
            .expect("chimed answers")
            .text()
            .await
            .expect("metrics text")
    }
}

/// The value of the sample `name_and_labels` (e.g. `chime_fires_total{trigger="manual"}`)
/// in Prometheus text, 0 when absent.
pub fn metric(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name_and_labels) && l[name_and_labels.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// The sum of every sample of metric `name` (all its label sets) in Prometheus text, 0
/// when absent.
pub fn metric_total(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Runs of `runs` in state `state`.
pub fn in_state<'a>(runs: &'a [Value], state: &str) -> Vec<&'a Value> {
    runs.iter().filter(|r| r["state"] == state).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_metric_total_adds_every_label_set_of_that_metric_only() {
        let text = "# TYPE chime_republishes_total counter\n\
                    chime_republishes_total{reason=\"unconfirmed\"} 3\n\
                    chime_republishes_total{reason=\"ack_timeout\"} 2\n\
                    chime_republishes_total_created 7\n\
                    chime_retries_total 5\n";
        assert_eq!(metric_total(text, "chime_republishes_total"), 5.0);
        assert_eq!(metric_total(text, "chime_retries_total"), 5.0);
        assert_eq!(metric_total(text, "chime_missing_total"), 0.0);
    }
}
