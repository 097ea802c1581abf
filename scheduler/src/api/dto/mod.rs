//! The HTTP API's wire types: what clients send and what `chimed` answers, by resource
//! ([`job`], [`batch`], [`backfill`], [`run`], [`run_search`], [`run_stats`], [`page`], [`preview`], [`cluster`], [`consumer`], [`dlq`],
//! [`token`]), and [`RequestError`], what parsing
//! them refuses.
//!
//! dto imports nothing from this crate but [`crate::domain`] (besides the protocol crate):
//! `chimectl` compiles against it and reaches the server's modules, with their broker and
//! database I/O, through nothing here. The API maps [`RequestError`] to its JSON error in
//! `api/error.rs`; keep server types (`ApiError`, the store, the services) out of dto.

pub mod audit;
pub mod backfill;
pub mod batch;
pub mod cluster;
pub mod consumer;
pub mod dlq;
mod error;
pub mod job;
pub mod job_search;
pub mod page;
pub mod preview;
pub mod run;
pub mod run_search;
pub mod run_stats;
pub mod token;

pub use audit::{AuditEntryResponse, AuditListQuery};
pub use backfill::{BackfillRequestBody, BackfillResponse};
pub use batch::{BatchItemError, BatchRefusal, JobBatchRequest, JobBatchResponse};
pub use cluster::{ClusterResponse, NodeResponse};
pub use consumer::{ConsumerGroupResponse, ConsumerResponse, ConsumersQuery, ConsumersResponse};
pub use dlq::{DlqItems, DlqMessage, DlqSummary, PurgeResponse, ReplayReport, ReplayRequest};
pub use error::RequestError;
pub use job::{BackoffRequest, JobRequest, JobResponse, JobResponseSpec, TargetRequest};
pub use job_search::JobListQuery;
pub use page::{ListQuery, ListResponse, parse_run_cursor, run_cursor};
pub use preview::{PreviewQuery, PreviewResponse, SchedulePreviewRequest, UpcomingFireResponse};
pub use run::{InstanceResponse, ItemResponse, RunResponse};
pub use run_search::RunSearchQuery;
pub use run_stats::{RunStatsQuery, RunStatsResponse};
pub use token::{MeResponse, TokenRequest, TokenResponse};

pub use crate::domain::{fire_state::FireState, timestamp::timestamp};
