//! Errors the consumer library returns to the application.

/// Why a consumer or an observer could not be built or could not run.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// A group, job, zone, observer or instance name breaks the naming rules of the
    /// protocol.
    #[error("invalid {what} name {name:?}: {}", name_rule(what))]
    InvalidName {
        /// Which kind of name (`group`, `job`, `zone`, `observer`, `instance`).
        what: &'static str,
        /// The offending name.
        name: String,
    },
    /// No handler was registered, so the consumer would only dead-letter work.
    #[error("no handlers registered: add at least one with .handler(job, handler)")]
    NoHandlers,
    /// An observer was built without a handler.
    #[error("observer has no handler: set one with .handler(|task| async {{ .. }})")]
    NoObserverHandler,
    /// An observer was built without any pattern, so it would receive nothing.
    #[error("observer subscribes to nothing: add at least one pattern with .subscribe(pattern)")]
    NoSubscriptions,
    /// A subscription pattern is not a topic pattern over `<app>.<job>`.
    #[error(
        "invalid topic pattern {pattern:?}: use dot-separated words, each a name, '*' (one word) or '#' (any number of words)"
    )]
    InvalidPattern {
        /// The offending pattern.
        pattern: String,
    },
    /// An option is out of range.
    #[error("invalid option {option}: {reason}")]
    InvalidOption {
        /// The option's name.
        option: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// The rule a name of kind `what` breaks, for [`ConsumerError::InvalidName`].
fn name_rule(what: &str) -> &'static str {
    match what {
        "instance" => "use 1-128 printable ASCII characters without spaces",
        _ => "use 1-128 letters, digits, '-' or '_', starting with a letter or digit",
    }
}
