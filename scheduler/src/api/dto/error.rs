//! Why a request's content is refused: what parsing the wire types finds before any
//! server state is read. It carries no server types; the API maps it to its JSON error
//! (`crate::api::error` has the `From` impl), so `chimectl` can use the same parsing.

use crate::domain::FieldError;

/// A request refused by its content alone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// A field is missing, unknown or invalid (`invalid_field`).
    #[error(transparent)]
    Invalid(#[from] FieldError),
    /// The job's payload is over the server's limit (`payload_too_large`).
    #[error(transparent)]
    PayloadTooLarge(FieldError),
}

impl RequestError {
    /// An invalid `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid(FieldError::new(field, message))
    }
}
