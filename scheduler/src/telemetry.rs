//! Logs and metrics: the `tracing` subscriber, the Prometheus recorder behind `/metrics`,
//! and the name and meaning of every metric `chimed` emits.

mod existence_checks;

use std::{io::IsTerminal, sync::OnceLock};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Log output format (`log_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    /// The format named `name` in the configuration: `text` or `json`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "text" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            _ => None,
        }
    }
}

/// Fires recorded, by `trigger` (`schedule`, `manual`, `backfill`).
pub const FIRES: &str = "chime_fires_total";
/// The timer's fire transactions; fires per transaction is `chime_fires_total` over
/// this.
pub const FIRE_TRANSACTIONS: &str = "chime_fire_transactions_total";
/// Jobs found to have missed fires, by `policy`.
pub const MISFIRES: &str = "chime_misfires_total";
/// Jobs the timer found to have missed fires, by `cause` (`behind`: this node held the
/// job's shard and had it in its timer at the missed due time, and was too slow;
/// `outage`: nobody ran the job then — a restart, a takeover, a store outage) and
/// `policy`.
pub const TIMER_MISFIRES: &str = "chime_timer_misfires_total";
/// Due fire times the timer did not record because their job misfired (collapsed by
/// `fire_once`, dropped by `skip`, beyond the limit of `catch_up`), by `cause` and
/// `policy` as [`TIMER_MISFIRES`]; cron jobs count at most 100 per job and fire.
pub const FIRES_COLLAPSED: &str = "chime_fires_collapsed_total";
/// How late the timer's latest round recorded the fires it was responsible for, in
/// seconds: the worst (record time − due time) among them, 0 when all were on time or
/// armed ahead.
pub const TIMER_LAG: &str = "chime_timer_lag_seconds";
/// Publish time minus scheduled fire time of first publishes, in seconds.
pub const FIRE_LATENESS: &str = "chime_fire_lateness_seconds";
/// Task publishes, by `outcome` (`confirmed`, `unroutable`, `nacked`, `failed`).
pub const PUBLISHES: &str = "chime_publishes_total";
/// Replies consumed, by `kind` (`ack`, `result`) and `effect` (`applied`, `stale`, `unknown_run`).
pub const REPLIES: &str = "chime_replies_total";
/// Store transactions that applied replies; replies per transaction is
/// `chime_replies_total` over this.
pub const REPLY_TRANSACTIONS: &str = "chime_reply_transactions_total";
/// How far behind the reply queue the collector was when it last applied one of its
/// progress probes (see `results::progress`), in seconds.
pub const REPLY_LAG: &str = "chime_reply_lag_seconds";
/// Results applied to runs, by `state` (`succeeded`, `failed`).
pub const RESULTS: &str = "chime_results_total";
/// Messages that could not be parsed and were dead-lettered, by `queue`.
pub const MALFORMED: &str = "chime_malformed_messages_total";
/// Replies (messages or items of a batch) the result collector refused and dead-lettered,
/// by `reason`: `malformed`, `version`, `invalid`, `store_refused`.
pub const REJECTED_REPLIES: &str = "chime_rejected_replies_total";
/// Store operations that failed, by `operation`.
pub const STORE_ERRORS: &str = "chime_store_errors_total";
/// Jobs held by the timer (due within the look-ahead window).
pub const TIMER_JOBS: &str = "chime_timer_jobs";
/// Tasks waiting to be published or confirmed.
pub const DISPATCH_PENDING: &str = "chime_dispatch_pending";
/// Tasks of fires armed ahead of their time, held until it comes.
pub const DISPATCH_ARMED: &str = "chime_dispatch_armed";
/// Runs whose tasks the broker confirmed and whose `dispatched` mark is not written yet.
/// Growing: the store is falling behind the broker.
pub const DISPATCH_UNMARKED: &str = "chime_dispatch_unmarked";
/// Confirmed runs whose `dispatched` mark was not written because their reply was
/// recorded first (the reply records `dispatched_at` itself).
pub const DISPATCH_MARKS_SKIPPED: &str = "chime_dispatch_marks_skipped_total";
/// Tasks not held in memory because the dispatcher's queue was full; the reconciler
/// publishes them later from the store.
pub const DISPATCH_DEFERRED: &str = "chime_dispatch_deferred_total";
/// Waiting tasks withdrawn before publishing because their run was no longer
/// `scheduled` (confirmed meanwhile, or the job deleted).
pub const DISPATCH_WITHDRAWN: &str = "chime_dispatch_withdrawn_total";
/// Broker connections (re)established, by `component`.
pub const BROKER_CONNECTS: &str = "chime_broker_connects_total";
/// Recorded runs published again, by `reason` (`unconfirmed`: no confirm came;
/// `takeover`: left unconfirmed by a shard's previous owner; `ack_timeout`: no ack within
/// the job's ack timeout; `run_timeout`: no result or heartbeat within its run timeout).
pub const REPUBLISHES: &str = "chime_republishes_total";
/// Overdue `scheduled` runs the reconciler did not publish again because the broker had
/// confirmed them and only their `dispatched` mark was still to be written
/// (`reason="unmarked"`), or ack and run deadlines not acted on because the reply that
/// answers them may still wait in the reply queue (`reason="replies_pending"`); counted
/// per pass that found them; `reason="no_consumer"`: ack deadlines moved on without
/// using an attempt because the run's work queue had no consumer;
/// `reason="takeover_answered"`: runs taken over from a dead node answered while the new
/// owner waited for their acks.
pub const REPUBLISHES_WITHHELD: &str = "chime_republishes_withheld_total";
/// Held fires of overlap `buffer_one` jobs released by the reconciler once their job's
/// previous run finished (then published as overdue `scheduled` runs).
pub const HELD_RELEASED: &str = "chime_held_fires_released_total";
/// 1 while a group's work queue (`queue`: the group's or a zone's) is known to have no
/// consumer and runs wait in it; 0 once it has one again (see `crate::reconcile`).
pub const GROUP_WITHOUT_CONSUMER: &str = "chime_group_without_consumer";
/// Consumers of each group's work queue (`chime.group.<group>`), by `group` and `queue`,
/// sampled with the dead-letter queues (every 15 s) for the groups some job targets.
pub const GROUP_CONSUMERS: &str = "chime_group_consumers";
/// Retryable failures given a retry (the run waits out its backoff as `failed`).
pub const RETRIES_SCHEDULED: &str = "chime_retries_scheduled_total";
/// Failed runs published again after their backoff.
pub const RETRIES: &str = "chime_retries_total";
/// Runs given up (`dead`), by `reason` (`failed`: attempts exhausted; `permanent`: a
/// permanent failure; `ack_timeout`, `run_timeout`; `delivery_limit`: the broker
/// dead-lettered the task after it crashed consumers; `rejected`: a consumer refused it).
pub const DEAD_RUNS: &str = "chime_dead_runs_total";
/// Dead letters published (confirmed) to a dead-letter queue.
pub const DEAD_LETTERS_PUBLISHED: &str = "chime_dead_letters_published_total";
/// Messages found in dead-letter queues by the notices consumer, by `queue` and `reason`
/// (the broker's `x-death` reason, or `scheduler` for Chime's own dead letters).
pub const DEAD_LETTERED: &str = "chime_dead_lettered_total";
/// Messages in each dead-letter queue, by `queue` (sampled).
pub const DLQ_DEPTH: &str = "chime_dlq_depth";
/// Age in seconds of the oldest message in each dead-letter queue, by `queue` (sampled).
pub const DLQ_OLDEST_AGE: &str = "chime_dlq_oldest_age_seconds";
/// Messages replayed from dead-letter queues, by `queue`.
pub const DLQ_REPLAYED: &str = "chime_dlq_replayed_total";
/// Fires not recorded because the shard's lease could not be proven in the fire
/// transaction (the node lost or could not renew it).
pub const FIRES_FENCED: &str = "chime_fires_fenced_total";
/// Due fires skipped, by `reason` (`overlap`: the previous run is unfinished and the job
/// forbids overlap; `no_live_zone`: a zone job without its own zone list found no zone
/// with live consumers).
pub const FIRES_SKIPPED: &str = "chime_fires_skipped_total";
/// Observer copies (on `chime.topics`) the broker did not confirm; they never affect runs.
pub const TOPIC_COPIES_LOST: &str = "chime_topic_copies_lost_total";
/// Fenced tasks not published because this node no longer trusted their shard's lease.
pub const DISPATCH_UNOWNED: &str = "chime_dispatch_unowned_total";
/// Runs given up (`dead`) because their task can never be published, by `reason`
/// (`name_too_long`, `invalid_name`, `destination_refused`).
pub const RUNS_UNPUBLISHABLE: &str = "chime_runs_unpublishable_total";
/// Lease renewal rounds, by `outcome` (`ok`, `error`).
pub const LEASE_RENEWALS: &str = "chime_lease_renewals_total";
/// Shard leases found taken over by another node at renewal.
pub const LEASE_LOSSES: &str = "chime_lease_losses_total";
/// Shards taken over after their previous owner's lease expired.
pub const SHARD_TAKEOVERS: &str = "chime_shard_takeovers_total";
/// Shards acquired (free or taken over).
pub const SHARD_ACQUISITIONS: &str = "chime_shard_acquisitions_total";
/// Shards released (rebalancing or leaving).
pub const SHARD_RELEASES: &str = "chime_shard_releases_total";
/// Seconds a taken-over shard went without a renewing owner (approximately the time its
/// jobs could not fire), per takeover.
pub const FAILOVER_GAP: &str = "chime_failover_gap_seconds";
/// Shards this node holds.
pub const SHARDS_OWNED: &str = "chime_shards_owned";
/// Live nodes in the cluster, as this node sees them.
pub const CLUSTER_LIVE_NODES: &str = "chime_cluster_live_nodes";
/// Finished runs deleted by retention (older than `run_retention`).
pub const RUNS_PRUNED: &str = "chime_runs_pruned_total";
/// Consumer instances deleted by retention (not heard from for a day).
pub const CONSUMERS_PRUNED: &str = "chime_consumers_pruned_total";
/// Observer patterns deleted by retention (not registered again for 7 days).
pub const OBSERVERS_PRUNED: &str = "chime_observers_pruned_total";
/// Observer patterns this node's dispatcher publishes copies for.
pub const OBSERVED_PATTERNS: &str = "chime_observed_patterns";
/// Observer copies published to `chime.topics`.
pub const TOPIC_COPIES: &str = "chime_topic_copies_total";
/// HTTP handlers that panicked (each answered 500 `internal`).
pub const HTTP_PANICS: &str = "chime_http_panics_total";
/// HTTP connections closed by the server's timeouts, by `reason` (`header_timeout`).
pub const HTTP_CONNECTIONS_CLOSED: &str = "chime_http_connections_closed_total";
/// Open HTTP API connections.
pub const HTTP_CONNECTIONS: &str = "chime_http_connections";
/// Runs cancelled through the API, by the `state` they were cancelled in.
pub const RUNS_CANCELLED: &str = "chime_runs_cancelled_total";
/// Cancel notices that could not be published (the runs stay cancelled).
pub const CANCEL_NOTICE_FAILURES: &str = "chime_cancel_notice_failures_total";
/// Jobs the scheduler paused itself after consecutive failed runs
/// (`pause_after_failures`), by `app`.
pub const JOBS_AUTO_PAUSED: &str = "chime_jobs_auto_paused_total";
/// Audit entries deleted by retention (older than run_retention).
pub const AUDIT_PRUNED: &str = "chime_audit_pruned_total";
/// Audit entries that could not be written (the change they describe stands).
pub const AUDIT_WRITE_FAILURES: &str = "chime_audit_write_failures_total";
/// API requests refused 401 (no token, a malformed header, an unknown or revoked token).
pub const HTTP_UNAUTHENTICATED: &str = "chime_http_unauthenticated_total";
/// Changes of the HTTPS certificate files, by `outcome` (`loaded`, or `rejected`: the
/// previous certificate keeps serving).
pub const HTTP_TLS_RELOADS: &str = "chime_http_tls_reloads_total";

pub use existence_checks::ExistenceCheckFilter;

/// Installs the global `tracing` subscriber, writing to standard error. Text logs are
/// coloured only when standard error is a terminal and `NO_COLOR` is not set. Later
/// calls do nothing.
pub fn init_tracing(format: LogFormat, filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(ExistenceCheckFilter);
    let _ = match format {
        LogFormat::Text => registry
            .with(
                fmt::layer()
                    .with_target(false)
                    .with_ansi(colour_logs())
                    .with_writer(std::io::stderr),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
}

/// Whether text logs get ANSI colours: only on a terminal, and not when the user asks
/// for none (<https://no-color.org>).
fn colour_logs() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The process's Prometheus recorder, installed on first use.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full(FIRE_LATENESS.to_string()),
                    &[
                        0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                        10.0, 30.0, 60.0,
                    ],
                )
                .expect("valid buckets")
                .set_buckets_for_metric(
                    Matcher::Full(FAILOVER_GAP.to_string()),
                    &[0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0],
                )
                .expect("valid buckets")
                .build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (tests embedding several
            // daemons); the handle still renders this one's registry.
            let _ = metrics::set_global_recorder(recorder);
            describe();
            zero_alerting_counters();
            handle
        })
        .clone()
}

/// Unlabelled counters that alert rules watch with `increase()`, exported at 0 from the
/// start: Prometheus takes a series' first sample as its start, so the first loss or
/// takeover of a process would not count if the series only appeared with it.
fn zero_alerting_counters() {
    for name in [
        LEASE_LOSSES,
        SHARD_TAKEOVERS,
        FIRES_FENCED,
        DISPATCH_UNOWNED,
    ] {
        metrics::counter!(name).increment(0);
    }
}

fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(FIRES, "Fires recorded, by trigger.");
    describe_counter!(
        JOBS_AUTO_PAUSED,
        "Jobs paused by the scheduler after consecutive failed runs, by app."
    );
    describe_counter!(
        MISFIRES,
        "Jobs found to have missed fires, by misfire policy."
    );
    describe_counter!(
        TIMER_MISFIRES,
        "Jobs the timer found to have missed fires, by cause (behind, outage) and misfire policy."
    );
    describe_counter!(
        FIRES_COLLAPSED,
        "Due fires not recorded because their job misfired, by cause (behind, outage) and misfire policy."
    );
    describe_gauge!(
        TIMER_LAG,
        Unit::Seconds,
        "How late the timer's latest round recorded the fires it was responsible for."
    );
    describe_histogram!(
        FIRE_LATENESS,
        Unit::Seconds,
        "Publish time minus due time (the scheduled fire time, plus its jitter)."
    );
    describe_counter!(
        FIRE_TRANSACTIONS,
        "The timer's store transactions that fired a batch of due jobs."
    );
    describe_counter!(PUBLISHES, "Task publishes, by outcome.");
    describe_counter!(REPLIES, "Consumer replies consumed, by kind and effect.");
    describe_counter!(
        REPLY_TRANSACTIONS,
        "Store transactions that applied a batch of replies."
    );
    describe_gauge!(
        REPLY_LAG,
        "Age of the newest reply-queue progress probe when the collector applied it."
    );
    describe_counter!(RESULTS, "Results applied to runs, by state.");
    describe_counter!(MALFORMED, "Unparseable messages dead-lettered, by queue.");
    describe_counter!(
        REJECTED_REPLIES,
        "Replies refused and dead-lettered by the result collector, by reason."
    );
    describe_counter!(STORE_ERRORS, "Failed store operations, by operation.");
    describe_gauge!(TIMER_JOBS, "Jobs held by the timer.");
    describe_gauge!(
        DISPATCH_PENDING,
        "Tasks waiting to be published or confirmed."
    );
    describe_gauge!(
        DISPATCH_ARMED,
        "Tasks of fires armed ahead of their time, held until it comes."
    );
    describe_gauge!(
        DISPATCH_UNMARKED,
        "Runs confirmed by the broker whose dispatched mark is not written yet."
    );
    describe_counter!(
        DISPATCH_MARKS_SKIPPED,
        "Confirmed runs not marked dispatched because their reply was recorded first."
    );
    describe_counter!(
        BROKER_CONNECTS,
        "Broker connections established, by component."
    );
    describe_counter!(
        REPUBLISHES,
        "Recorded runs published again, by reason (unconfirmed, takeover, ack_timeout, run_timeout)."
    );
    describe_counter!(
        REPUBLISHES_WITHHELD,
        "Overdue runs not acted on because their confirm was still to be written or their reply may still be queued, by reason."
    );
    describe_counter!(
        HELD_RELEASED,
        "Held fires of overlap buffer_one jobs released once their previous run finished."
    );
    describe_gauge!(
        GROUP_WITHOUT_CONSUMER,
        "1 while a group's work queue has no consumer and runs wait in it, by group and queue."
    );
    describe_gauge!(
        GROUP_CONSUMERS,
        "Live consumer instances of each group some job targets (from presence, sampled), by group and work queue."
    );
    describe_counter!(RETRIES, "Failed runs published again after their backoff.");
    describe_counter!(
        RETRIES_SCHEDULED,
        "Retryable failures given a retry after a backoff."
    );
    describe_counter!(DEAD_RUNS, "Runs given up, by reason.");
    describe_counter!(
        DEAD_LETTERS_PUBLISHED,
        "Dead letters published to dead-letter queues."
    );
    describe_counter!(
        DEAD_LETTERED,
        "Dead-lettered messages noticed, by queue and reason."
    );
    describe_gauge!(DLQ_DEPTH, "Messages in each dead-letter queue (sampled).");
    describe_gauge!(
        DLQ_OLDEST_AGE,
        Unit::Seconds,
        "Age of the oldest message in each dead-letter queue (sampled)."
    );
    describe_counter!(DLQ_REPLAYED, "Messages replayed from dead-letter queues.");
    describe_counter!(
        RUNS_CANCELLED,
        "Runs cancelled through the API, by the state they were cancelled in."
    );
    describe_counter!(
        CANCEL_NOTICE_FAILURES,
        "Cancel notices that could not be published (the runs stay cancelled)."
    );
    describe_counter!(
        FIRES_FENCED,
        "Fires refused because the shard lease was not proven."
    );
    describe_counter!(FIRES_SKIPPED, "Due fires skipped, by reason.");
    describe_counter!(
        TOPIC_COPIES_LOST,
        "Observer copies of tasks the broker did not confirm."
    );
    describe_counter!(
        DISPATCH_UNOWNED,
        "Tasks not published because their shard was lost."
    );
    describe_counter!(
        RUNS_UNPUBLISHABLE,
        "Runs given up because their task can never be published, by reason."
    );
    describe_counter!(LEASE_RENEWALS, "Lease renewal rounds, by outcome.");
    describe_counter!(LEASE_LOSSES, "Shard leases lost to another node.");
    describe_counter!(
        SHARD_TAKEOVERS,
        "Expired shards taken over from another node."
    );
    describe_counter!(SHARD_ACQUISITIONS, "Shards acquired.");
    describe_counter!(SHARD_RELEASES, "Shards released.");
    describe_histogram!(
        FAILOVER_GAP,
        Unit::Seconds,
        "Time a taken-over shard had no renewing owner."
    );
    describe_gauge!(SHARDS_OWNED, "Shards held by this node.");
    describe_gauge!(CLUSTER_LIVE_NODES, "Live nodes seen by this node.");
    describe_counter!(
        RUNS_PRUNED,
        "Finished runs deleted by retention (older than run_retention)."
    );
    describe_counter!(
        CONSUMERS_PRUNED,
        "Consumer instances deleted by retention (not heard from for a day)."
    );
    describe_counter!(
        OBSERVERS_PRUNED,
        "Observer patterns deleted by retention (not registered again for 7 days)."
    );
    describe_gauge!(
        OBSERVED_PATTERNS,
        "Observer patterns this node publishes copies for (-1: copies for every task)."
    );
    describe_counter!(TOPIC_COPIES, "Observer copies published to chime.topics.");
    describe_counter!(
        HTTP_PANICS,
        "HTTP handlers that panicked; each was answered 500 internal."
    );
    describe_counter!(
        HTTP_CONNECTIONS_CLOSED,
        "HTTP connections the server closed itself, by reason."
    );
    describe_gauge!(HTTP_CONNECTIONS, "Open HTTP API connections.");
    describe_counter!(
        AUDIT_PRUNED,
        "Audit entries deleted by retention (older than run_retention)."
    );
    describe_counter!(
        AUDIT_WRITE_FAILURES,
        "Audit entries that could not be written; the change they describe stands."
    );
    describe_counter!(
        HTTP_UNAUTHENTICATED,
        "API requests refused 401: no token, a malformed header, or an unknown or revoked token."
    );
    describe_counter!(
        HTTP_TLS_RELOADS,
        "Changes of the HTTPS certificate files, by outcome (loaded or rejected)."
    );
}
