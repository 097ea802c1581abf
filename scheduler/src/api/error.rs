//! The API's one error type: a code that maps to an HTTP status and the JSON error body
//! `{"error": {"code": "...", "message": "...", "field": "..."}}`. Database details are
//! logged, never sent to clients.

use axum::{
    Json,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::Serialize;
use tracing::error;

use super::dto::RequestError;
use crate::{
    app::{
        AuditError, AuthError, CancelError, ConsumersError, JobsError, NodeError, RunsError,
        TokensError,
    },
    dlq::DlqError,
    domain::{FieldError, access::Denied},
    store::StoreError,
};

/// Machine-readable error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The body is not JSON.
    InvalidJson,
    /// A field is missing, unknown or invalid.
    InvalidField,
    /// A valid request for something this version does not do.
    Unsupported,
    /// The request is not valid HTTP (a bad method, target, header or version).
    BadRequest,
    /// The body is not JSON by its `Content-Type`.
    UnsupportedMediaType,
    /// The payload or body is over the limit.
    PayloadTooLarge,
    /// The request target (path and query) is too long.
    UriTooLong,
    /// The request headers are too many or too large.
    HeadersTooLarge,
    /// The request carries no valid API token.
    Unauthorized,
    /// The token's role or apps do not allow this.
    Forbidden,
    /// The change would take an app over a quota.
    QuotaExceeded,
    /// No such job, run, token or route.
    NotFound,
    /// The method does not apply to the route.
    MethodNotAllowed,
    /// Another job has this app and name.
    DuplicateName,
    /// The job changed since the version the client named.
    VersionConflict,
    /// A backfill with overlap `forbid` found the job with an unfinished run.
    JobBusy,
    /// The run already finished (`succeeded`, `dead` or `cancelled`): it cannot be
    /// cancelled.
    RunFinished,
    /// A dependency (the database) is unavailable; retry later.
    Unavailable,
    /// A bug or an unexpected failure.
    Internal,
}

impl ErrorCode {
    /// The HTTP status of this code.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorCode::InvalidJson
            | ErrorCode::InvalidField
            | ErrorCode::Unsupported
            | ErrorCode::BadRequest => StatusCode::BAD_REQUEST,
            ErrorCode::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::UriTooLong => StatusCode::URI_TOO_LONG,
            ErrorCode::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorCode::Forbidden | ErrorCode::QuotaExceeded => StatusCode::FORBIDDEN,
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::DuplicateName
            | ErrorCode::VersionConflict
            | ErrorCode::JobBusy
            | ErrorCode::RunFinished => StatusCode::CONFLICT,
            ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// An API error response.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[schema(as = ErrorDetail)]
pub struct ApiError {
    /// What kind of error.
    pub code: ErrorCode,
    /// What went wrong, for a human.
    pub message: String,
    /// The request field at fault, as a dotted path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl ApiError {
    /// An error without a field.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            field: None,
        }
    }

    /// An error about `field`.
    pub fn field(code: ErrorCode, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            field: Some(field.into()),
        }
    }

    /// A failure the client cannot act on; the details go to the server log.
    pub fn internal() -> Self {
        Self::new(ErrorCode::Internal, "internal error; see the server log")
    }

    /// The error for a response of `status` that carries no JSON error body (one made
    /// by the HTTP layer or a framework rejection rather than a handler).
    pub fn for_status(status: StatusCode) -> Self {
        let (code, message) = match status {
            StatusCode::NOT_FOUND => (ErrorCode::NotFound, "no such route"),
            StatusCode::METHOD_NOT_ALLOWED => (
                ErrorCode::MethodNotAllowed,
                "method not allowed on this route",
            ),
            StatusCode::PAYLOAD_TOO_LARGE => {
                (ErrorCode::PayloadTooLarge, "request body is over the limit")
            }
            StatusCode::UNSUPPORTED_MEDIA_TYPE => (
                ErrorCode::UnsupportedMediaType,
                "send the body as Content-Type: application/json",
            ),
            StatusCode::URI_TOO_LONG => (ErrorCode::UriTooLong, "request target is too long"),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => (
                ErrorCode::HeadersTooLarge,
                "request headers are too many or too large",
            ),
            StatusCode::SERVICE_UNAVAILABLE => (
                ErrorCode::Unavailable,
                "temporarily unavailable; retry later",
            ),
            status if status.is_server_error() => {
                (ErrorCode::Internal, "internal error; see the server log")
            }
            _ => (
                ErrorCode::BadRequest,
                "malformed HTTP request (method, target, header or version)",
            ),
        };
        Self::new(code, message)
    }

    /// No job with this id.
    pub fn job_not_found(id: &str) -> Self {
        Self::new(ErrorCode::NotFound, format!("no job with id {id:?}"))
    }

    /// No run with this id.
    pub fn run_not_found(id: &str) -> Self {
        Self::new(ErrorCode::NotFound, format!("no run with id {id:?}"))
    }
}

impl From<FieldError> for ApiError {
    fn from(e: FieldError) -> Self {
        Self::field(ErrorCode::InvalidField, e.field, e.message)
    }
}

impl From<RequestError> for ApiError {
    fn from(e: RequestError) -> Self {
        match e {
            RequestError::Invalid(e) => e.into(),
            RequestError::PayloadTooLarge(e) => {
                Self::field(ErrorCode::PayloadTooLarge, e.field, e.message)
            }
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            // The outcomes of job operations, worded once (as the jobs service's).
            StoreError::DuplicateName { .. }
            | StoreError::VersionConflict { .. }
            | StoreError::JobNotFound(_) => JobsError::from(e).into(),
            StoreError::Database(
                sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed,
            ) => {
                error!(error = %e, "database unavailable");
                Self::new(
                    ErrorCode::Unavailable,
                    "the database is unavailable; retry later",
                )
            }
            other => {
                error!(error = %other, "store failure");
                Self::internal()
            }
        }
    }
}

impl From<JobsError> for ApiError {
    fn from(e: JobsError) -> Self {
        match e {
            JobsError::NotFound(id) => Self::job_not_found(&id.to_string()),
            JobsError::Denied(denied) => denied.into(),
            JobsError::Quota(exceeded) => Self::field(
                ErrorCode::QuotaExceeded,
                match exceeded {
                    crate::domain::quota::QuotaExceeded::Jobs { .. } => "app",
                    crate::domain::quota::QuotaExceeded::Groups { .. } => "target.group",
                },
                exceeded.to_string(),
            ),
            JobsError::Invalid(e) => e.into(),
            JobsError::DuplicateName { app, name } => Self::field(
                ErrorCode::DuplicateName,
                "name",
                format!("a job named {name:?} already exists in app {app:?}"),
            ),
            JobsError::VersionConflict { expected, current } => Self::field(
                ErrorCode::VersionConflict,
                "version",
                format!("the job is at version {current}, not {expected}: read it again and retry"),
            ),
            JobsError::NoLiveZone { .. } => Self::new(ErrorCode::Unavailable, e.to_string()),
            JobsError::Busy(_) => Self::field(ErrorCode::JobBusy, "overlap", e.to_string()),
            // Logged where the change failed.
            JobsError::ChangeFailed(_) => Self::internal(),
            JobsError::Store(e) => e.into(),
        }
    }
}

impl From<CancelError> for ApiError {
    fn from(e: CancelError) -> Self {
        match e {
            CancelError::RunNotFound(id) => Self::run_not_found(&id.to_string()),
            CancelError::Finished(refused) => {
                Self::new(ErrorCode::RunFinished, refused.to_string())
            }
            CancelError::Denied(denied) => denied.into(),
            CancelError::Store(e) => e.into(),
        }
    }
}

impl From<RunsError> for ApiError {
    fn from(e: RunsError) -> Self {
        match e {
            RunsError::RunNotFound(id) => Self::run_not_found(&id.to_string()),
            RunsError::JobNotFound(id) => Self::job_not_found(&id.to_string()),
            RunsError::Denied(denied) => denied.into(),
            RunsError::Store(e) => e.into(),
        }
    }
}

impl From<DlqError> for ApiError {
    fn from(e: DlqError) -> Self {
        match e {
            DlqError::NotADeadLetterQueue(_) => {
                Self::field(ErrorCode::InvalidField, "queue", e.to_string())
            }
            DlqError::NoSuchQueue(_) => Self::new(ErrorCode::NotFound, e.to_string()),
            DlqError::Denied(denied) => denied.into(),
            DlqError::Broker(_) | DlqError::Publish(_) => {
                error!(error = %e, "dead-letter operation failed on the broker");
                Self::new(
                    ErrorCode::Unavailable,
                    "rabbitmq is unavailable or refused the operation; retry later",
                )
            }
            DlqError::Store(e) => e.into(),
        }
    }
}

impl From<NodeError> for ApiError {
    fn from(e: NodeError) -> Self {
        match e {
            NodeError::Denied(denied) => denied.into(),
            NodeError::Store(e) => e.into(),
        }
    }
}

impl From<ConsumersError> for ApiError {
    fn from(e: ConsumersError) -> Self {
        match e {
            ConsumersError::Denied(denied) => denied.into(),
            ConsumersError::Store(e) => e.into(),
        }
    }
}

impl From<AuditError> for ApiError {
    fn from(e: AuditError) -> Self {
        match e {
            AuditError::Denied(denied) => denied.into(),
            AuditError::Store(e) => e.into(),
        }
    }
}

impl From<Denied> for ApiError {
    fn from(e: Denied) -> Self {
        Self::new(ErrorCode::Forbidden, e.to_string())
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::Unavailable => Self::new(ErrorCode::Unavailable, e.to_string()),
            _ => Self::new(ErrorCode::Unauthorized, e.to_string()),
        }
    }
}

impl From<TokensError> for ApiError {
    fn from(e: TokensError) -> Self {
        match e {
            TokensError::Denied(denied) => denied.into(),
            TokensError::Invalid { field, .. } => {
                Self::field(ErrorCode::InvalidField, field, e.to_string())
            }
            TokensError::NameTaken(_) => {
                Self::field(ErrorCode::DuplicateName, "name", e.to_string())
            }
            TokensError::NotFound(_) => Self::new(ErrorCode::NotFound, e.to_string()),
            TokensError::Store(e) => e.into(),
        }
    }
}

/// The JSON body of every error answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ApiError,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.code.status(),
            Json(ErrorBody {
                error: self.clone(),
            }),
        )
            .into_response();
        if matches!(
            self.code,
            ErrorCode::PayloadTooLarge | ErrorCode::HeadersTooLarge | ErrorCode::BadRequest
        ) {
            // The rest of an oversized body is never read, so the connection cannot carry
            // another request; saying so stops clients from reusing it and failing.
            response.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
        }
        if self.code == ErrorCode::Unauthorized {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer realm=\"chime\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_map_to_codes() {
        let dup: ApiError = StoreError::DuplicateName {
            app: "a".into(),
            name: "n".into(),
        }
        .into();
        assert_eq!(
            (dup.code.status(), dup.field.as_deref()),
            (StatusCode::CONFLICT, Some("name"))
        );
        let conflict: ApiError = StoreError::VersionConflict {
            id: uuid::Uuid::nil(),
            expected: 1,
            current: 2,
        }
        .into();
        assert_eq!(conflict.code, ErrorCode::VersionConflict);
        let down: ApiError = StoreError::Database(sqlx::Error::PoolTimedOut).into();
        assert_eq!(down.code.status(), StatusCode::SERVICE_UNAVAILABLE);
        let bug: ApiError = StoreError::Corrupt {
            what: "x".into(),
            reason: "secret detail".into(),
        }
        .into();
        assert!(!bug.message.contains("secret"));
    }

    #[test]
    fn request_errors_map_to_codes() {
        let invalid: ApiError = RequestError::invalid("limit", "out of range").into();
        assert_eq!(
            invalid,
            ApiError::field(ErrorCode::InvalidField, "limit", "out of range")
        );
        let big: ApiError =
            RequestError::PayloadTooLarge(FieldError::new("payload", "too big")).into();
        assert_eq!(
            (
                big.code.status(),
                big.field.as_deref(),
                big.message.as_str()
            ),
            (StatusCode::PAYLOAD_TOO_LARGE, Some("payload"), "too big")
        );
    }

    #[test]
    fn bare_statuses_get_their_documented_code() {
        for (status, code) in [
            (StatusCode::NOT_FOUND, ErrorCode::NotFound),
            (StatusCode::METHOD_NOT_ALLOWED, ErrorCode::MethodNotAllowed),
            (StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::PayloadTooLarge),
            (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ErrorCode::UnsupportedMediaType,
            ),
            (StatusCode::URI_TOO_LONG, ErrorCode::UriTooLong),
            (
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                ErrorCode::HeadersTooLarge,
            ),
            (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable),
            (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal),
            (StatusCode::BAD_GATEWAY, ErrorCode::Internal),
            (StatusCode::BAD_REQUEST, ErrorCode::BadRequest),
            (StatusCode::UNPROCESSABLE_ENTITY, ErrorCode::BadRequest),
        ] {
            let error = ApiError::for_status(status);
            assert_eq!(error.code, code, "{status}");
            if status.as_u16() < 500 && status != StatusCode::UNPROCESSABLE_ENTITY {
                assert_eq!(code.status(), status);
            }
        }
    }

    #[test]
    fn service_errors_map_to_codes() {
        let id = uuid::Uuid::nil();
        let missing: ApiError = JobsError::NotFound(id).into();
        assert_eq!(
            (missing.code, missing.message.as_str()),
            (
                ErrorCode::NotFound,
                "no job with id \"00000000-0000-0000-0000-000000000000\""
            )
        );
        let invalid: ApiError =
            JobsError::Invalid(FieldError::new("schedule.cron", "never")).into();
        assert_eq!(
            (invalid.code, invalid.field.as_deref()),
            (ErrorCode::InvalidField, Some("schedule.cron"))
        );
        let zone: ApiError = JobsError::NoLiveZone {
            group: "web".into(),
        }
        .into();
        assert_eq!(zone.code.status(), StatusCode::SERVICE_UNAVAILABLE);
        let failed: ApiError = JobsError::ChangeFailed("task panicked".into()).into();
        assert_eq!(failed, ApiError::internal());
        // A store outcome reads the same whether it comes through a service or not.
        let through: ApiError = JobsError::from(StoreError::VersionConflict {
            id,
            expected: 1,
            current: 2,
        })
        .into();
        let direct: ApiError = StoreError::VersionConflict {
            id,
            expected: 1,
            current: 2,
        }
        .into();
        assert_eq!(through, direct);
        let run: ApiError = RunsError::RunNotFound(id).into();
        assert_eq!(run.code, ErrorCode::NotFound);
        assert!(run.message.starts_with("no run with id"), "{}", run.message);
        let down: ApiError =
            RunsError::Store(StoreError::Database(sqlx::Error::PoolTimedOut)).into();
        assert_eq!(down.code, ErrorCode::Unavailable);
    }

    #[test]
    fn dlq_errors_map_to_codes() {
        let wrong: ApiError = DlqError::NotADeadLetterQueue("orders".into()).into();
        assert_eq!(
            (wrong.code.status(), wrong.field.as_deref()),
            (StatusCode::BAD_REQUEST, Some("queue"))
        );
        assert!(
            wrong.message.contains("dead-letter queue"),
            "{}",
            wrong.message
        );
        let missing: ApiError = DlqError::NoSuchQueue("chime.group.x.dlq".into()).into();
        assert_eq!(missing.code, ErrorCode::NotFound);
        let broker: ApiError =
            DlqError::Broker(lapin::Error::from(lapin::ErrorKind::ChannelsLimitReached)).into();
        assert_eq!(broker.code.status(), StatusCode::SERVICE_UNAVAILABLE);
        let store: ApiError =
            DlqError::Store(StoreError::Database(sqlx::Error::PoolTimedOut)).into();
        assert_eq!(store.code, ErrorCode::Unavailable);
    }
}
