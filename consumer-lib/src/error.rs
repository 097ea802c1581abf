//! Errors the consumer library returns to the application.

/// Why a consumer could not be built or could not run.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// A group or job name breaks the naming rules of the protocol.
    #[error(
        "invalid {what} name {name:?}: use 1-128 letters, digits, '-' or '_', starting with a letter or digit"
    )]
    InvalidName {
        /// Which kind of name.
        what: &'static str,
        /// The offending name.
        name: String,
    },
    /// No handler was registered, so the consumer would only dead-letter work.
    #[error("no handlers registered: add at least one with .handler(job, handler)")]
    NoHandlers,
    /// An option is out of range.
    #[error("invalid option {option}: {reason}")]
    InvalidOption {
        /// The option's name.
        option: &'static str,
        /// What is wrong.
        reason: String,
    },
}
