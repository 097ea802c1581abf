//! # chime-scheduler
//!
//! The Chime scheduler daemon (`chimed`) and CLI (`chimectl`) as a library.
pub mod api;
pub mod broker;
pub mod cli;
pub mod cluster;
pub mod config;
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
