//! A small typed client of chimed's HTTP API.

use reqwest::{Method, StatusCode};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use uuid::Uuid;

use crate::{
    api::{
        dlq::{DlqItems, PurgeResponse, ReplayRequest},
        dto::{JobResponse, ListResponse},
    },
    dlq::{DlqMessage, DlqSummary, ReplayReport},
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
    /// The server could not be reached or answered garbage.
    #[error("cannot talk to chimed at {server}: {reason}")]
    Transport {
        /// The server.
        server: String,
        /// Why.
        reason: String,
    },
    /// No job matches the name.
    #[error("no job named {0:?} (give a job id, app/name, or a name in app \"default\")")]
    UnknownJob(String),
}

/// The API client.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    http: reqwest::Client,
}

impl Client {
    /// A client of the server at `base` (e.g. `http://127.0.0.1:8080`).
    pub fn new(base: &str) -> Result<Self, ClientError> {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .map_err(|e| ClientError::Transport {
                server: base.to_string(),
                reason: e.to_string(),
            })?;
        Ok(Self {
            base: base.trim_end_matches('/').to_string(),
            http,
        })
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

    async fn send<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T, ClientError> {
        let transport = |e: reqwest::Error| ClientError::Transport {
            server: self.base.clone(),
            reason: e.to_string(),
        };
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(transport)?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(transport)?;
        if !status.is_success() {
            let error: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let error = &error["error"];
            return Err(ClientError::Api {
                status,
                code: error["code"].as_str().unwrap_or("http_error").to_string(),
                message: error["message"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("HTTP {status}")),
                field: error["field"].as_str().map(str::to_string),
            });
        }
        let bytes = if bytes.is_empty() {
            &b"null"[..]
        } else {
            &bytes[..]
        };
        serde_json::from_slice(bytes).map_err(|e| ClientError::Transport {
            server: self.base.clone(),
            reason: format!("unexpected response: {e}"),
        })
    }

    /// Every job (of `app`), following cursors, at most `limit`.
    pub async fn all_jobs(
        &self,
        app: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<JobResponse>, ClientError> {
        let mut jobs = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut path = "/v1/jobs?limit=1000".to_string();
            if let Some(app) = app {
                path.push_str(&format!("&app={app}"));
            }
            if let Some(cursor) = &cursor {
                path.push_str(&format!("&cursor={cursor}"));
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
        self.all_jobs(Some(app), None)
            .await?
            .into_iter()
            .find(|job| job.spec.name == name)
            .map(|job| job.id)
            .ok_or_else(|| ClientError::UnknownJob(reference.to_string()))
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
    use super::segment;

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(segment("chime.group.a-b_c.dlq"), "chime.group.a-b_c.dlq");
        assert_eq!(segment("a/b?c d"), "a%2Fb%3Fc%20d");
    }
}
