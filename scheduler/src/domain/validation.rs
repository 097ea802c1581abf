//! A validation failure that names the offending field, as the API reports it.

/// Input that failed validation: which field (dotted path, e.g. `schedule.cron`) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// Dotted path of the field.
    pub field: String,
    /// What is wrong, in lowercase, naming the bad value where that helps.
    pub message: String,
}

impl FieldError {
    /// A failure of `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}
