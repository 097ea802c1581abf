//! # chime-scheduler
//!
//! The Chime scheduler daemon (`chimed`) and CLI (`chimectl`) as a library.
pub mod api;
pub mod app;
pub mod broker;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod console;
pub mod daemon;
pub mod dispatch;
pub mod dlq;
pub mod domain;
pub mod reconcile;
pub mod results;
pub mod retention;
pub mod store;
pub mod telemetry;
pub mod timer;

/// The git commit the binaries were built from (12 hex digits), or `unknown` (see
/// `build.rs`).
pub const GIT_COMMIT: &str = env!("CHIME_GIT_COMMIT");

/// The version as `--version` prints it after the program's name: `0.1.0 (commit
/// 0123456789ab)`.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("CHIME_GIT_COMMIT"),
    ")"
);
