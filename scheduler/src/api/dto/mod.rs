//! The HTTP API's wire types: what clients send and what `chimed` answers, by resource
//! ([`job`], [`run`], [`page`], [`cluster`], [`dlq`]). They name only [`crate::domain`]
//! and the protocol crate, so `chimectl` reads the API through them alone, without the
//! server's modules.

pub mod cluster;
pub mod dlq;
pub mod job;
pub mod page;
pub mod run;

pub use cluster::{ClusterResponse, NodeResponse};
pub use dlq::{DlqItems, DlqMessage, DlqSummary, PurgeResponse, ReplayReport, ReplayRequest};
pub use job::{BackoffRequest, JobRequest, JobResponse, JobResponseSpec, TargetRequest};
pub use page::{ListQuery, ListResponse, parse_run_cursor, run_cursor};
pub use run::{InstanceResponse, ItemResponse, RunResponse};

pub use crate::domain::{fire_state::FireState, timestamp::timestamp};
