//! The bounds and defaults of a job's settings, shared by validation, the API and the
//! runs recorded from a job.

use std::time::Duration;

/// Default app namespace.
pub const DEFAULT_APP: &str = "default";
/// Default ack timeout.
pub const DEFAULT_ACK_TIMEOUT: Duration = Duration::from_secs(30);
/// Shortest ack timeout.
pub const MIN_ACK_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest ack timeout: below RabbitMQ's default consumer timeout (30 min), past which
/// the broker closes the consumer's channel anyway.
pub const MAX_ACK_TIMEOUT: Duration = Duration::from_secs(25 * 60);
/// Default run timeout.
pub const DEFAULT_RUN_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// Shortest run timeout.
pub const MIN_RUN_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest run timeout: a day of silence from a running handler.
pub const MAX_RUN_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// Default max attempts.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
/// Most attempts.
pub const MAX_ATTEMPTS: u32 = 100;
/// Default catch-up bound.
pub const DEFAULT_CATCH_UP_LIMIT: u32 = 10;
/// Largest catch-up bound.
pub const MAX_CATCH_UP_LIMIT: u32 = 1000;
/// Largest `pause_after_failures`: a job pauses after at most this many consecutive
/// failed runs.
pub const MAX_PAUSE_AFTER_FAILURES: u32 = 1000;
/// Most items a sharded job's fire is split into.
pub const MAX_SHARDS: u32 = 1024;
/// Most zones a zone job lists.
pub const MAX_ZONES: usize = 64;
/// Most jobs one bulk import (`POST /v1/jobs/batch`) creates.
pub const MAX_BATCH_JOBS: usize = 10_000;
