//! `chimed` assembled: opens the store, joins the cluster (PostgreSQL) or locks the file
//! (SQLite), starts the dispatcher, timer, reconciler, pruner, result collector and HTTP
//! API, and stops them in order on shutdown — stop taking work, stop firing, publish and
//! confirm what was already recorded, hand the shards back, then close.

mod admin_token;
pub mod args;
pub mod http;
pub mod tls;

use std::{future::Future, sync::Arc};

use anyhow::Context;
use chime_consumer::url::{redact, scrub};
use tokio::{net::TcpListener, sync::Notify, task::JoinHandle};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

/// How often the DLQ depth and age gauges are sampled.
const DLQ_SAMPLE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(15);

use crate::{
    api::{self, AppParts, AppState},
    app::{Audit, Cancellations, Consumers, FailureWatch, Jobs, Node, Runs, Tokens},
    broker::{ConfirmedPublisher, GroupDeclarer},
    cluster::{
        DEFAULT_SHARD_COUNT, Membership, Ownership,
        notices::{self, JobNotice},
    },
    config::Config,
    console,
    dispatch::Dispatcher,
    dlq::{self, DeadLetters},
    reconcile::{ReconcileSettings, Reconciler},
    results::{Probes, ReplyProgress, ResultCollector},
    retention::{Pruner, RetentionSettings},
    store::{self, Backend},
    telemetry,
    timer::{Timer, TimerSettings},
};

/// Runs `chimed` with `config` until `shutdown` completes, then shuts down gracefully.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    info!(
        version = env!("CARGO_PKG_VERSION"),
        commit = crate::GIT_COMMIT,
        "chimed starting"
    );
    // A certificate that does not load stops chimed before it touches anything else.
    let tls = match &config.http_tls {
        Some(files) => Some(
            tls::ServerTls::load(files.clone()).context("loading the API's HTTPS certificate")?,
        ),
        None => None,
    };
    let backend = store::open_backend(&config.database_url, config.shard_count)
        .await
        .map_err(|error| {
            // The store's own error may quote the URL or a part of it.
            let url = &config.database_url;
            anyhow::anyhow!(
                "opening the store at {}: {}",
                redact(url),
                scrub(&error.to_string(), url)
            )
        })?;
    let store = backend.store();
    let node = node_id(&config.node_name);
    let (ownership, _single_node_lock) = match &backend {
        Backend::Sqlite(sqlite) => (
            Ownership::single_node(node.as_str(), DEFAULT_SHARD_COUNT),
            Some(sqlite.lock_single_node()?),
        ),
        Backend::Postgres(postgres) => {
            if postgres.shard_count() != config.shard_count {
                warn!(
                    configured = config.shard_count,
                    stored = postgres.shard_count(),
                    "the cluster already exists: using its shard count"
                );
            }
            (
                Ownership::clustered(node.as_str(), postgres.shard_count()),
                None,
            )
        }
    };
    info!(backend = store.backend(), node = %node, shards = ownership.shard_count(), "store ready");
    let listener = TcpListener::bind(config.http_addr)
        .await
        .with_context(|| format!("listening on {}", config.http_addr))?;
    let metrics = telemetry::metrics_handle();

    let (dispatch, dispatcher) = Dispatcher::new(
        store.clone(),
        ownership.clone(),
        &config.amqp_url,
        config.observer_copies,
    );
    let timer_settings = TimerSettings {
        lookahead: config.lookahead,
        misfire_grace: config.misfire_grace,
        fire_ahead: config.fire_ahead,
    };
    let (timer_handle, timer) = Timer::new(
        store.clone(),
        dispatch.clone(),
        ownership.clone(),
        timer_settings,
    );
    let publisher = Arc::new(ConfirmedPublisher::new(&config.amqp_url, "dead-letters"));
    let reply_progress = ReplyProgress::new();
    let reconciler = Reconciler::new(
        store.clone(),
        dispatch.clone(),
        publisher,
        ownership.clone(),
        reply_progress.clone(),
        ReconcileSettings {
            republish_after: config.republish_after,
            interval: config.reconcile_interval,
            armed_ahead: timer_settings.arming_horizon(),
            misfire_grace: config.misfire_grace,
            takeover_ack_wait: config.takeover_ack_wait,
        },
    );
    let pruner = Pruner::new(
        store.clone(),
        RetentionSettings {
            consumer_retention: config.consumer_retention,
            ..RetentionSettings::new(config.run_retention)
        },
    );
    let collector = ResultCollector::new(
        store.clone(),
        &config.amqp_url,
        Probes {
            node: ownership.node().to_owned(),
            interval: config.reconcile_interval,
            progress: reply_progress,
        },
        dispatch.clone(),
    )
    .with_reply_users(config.reply_users.clone());
    let dead_letters = Arc::new(DeadLetters::new(
        store.clone(),
        &config.amqp_url,
        ownership.node(),
    ));
    let bootstrap = match &config.admin_token_file {
        Some(path) => Some(admin_token::load_or_create(path)?),
        None => None,
    };
    let jobs = Arc::new(
        Jobs::new(
            store.clone(),
            ownership.node(),
            timer_handle.clone(),
            dispatch.clone(),
            GroupDeclarer::new(&config.amqp_url),
        )
        .with_quotas(config.quotas),
    );
    let failure_watch =
        FailureWatch::new(jobs.clone(), ownership.clone(), config.reconcile_interval);
    let state = AppState::new(AppParts {
        tokens: Arc::new(Tokens::new(store.clone(), bootstrap.as_deref())),
        audit: Arc::new(Audit::new(store.clone())),
        consumers: Arc::new(Consumers::new(store.clone())),
        metrics_need_token: config.metrics_need_token,
        jobs,
        runs: Arc::new(Runs::new(store.clone())),
        cancellations: Arc::new(Cancellations::new(
            store.clone(),
            Arc::new(ConfirmedPublisher::new(&config.amqp_url, "cancels")),
        )),
        dead_letters: dead_letters.clone(),
        node: Arc::new(Node::new(
            backend.clone(),
            ownership.clone(),
            config.cluster,
            dispatch,
        )),
        payload_limit: config.payload_limit,
        metrics,
    });

    // Each core task has the token that asks it to stop; a task that ends before being
    // asked (a panic, a bug) trips `fatal`, and chimed shuts down and exits non-zero so an
    // orchestrator restarts it, rather than live on without firing.
    let intake = CancellationToken::new();
    let drain = CancellationToken::new();
    let collecting = CancellationToken::new();
    let fatal = CancellationToken::new();
    let dispatcher = supervise(
        "dispatcher",
        dispatcher.run(drain.clone(), config.shutdown_timeout),
        &drain,
        &fatal,
    );
    let collector = supervise(
        "result collector",
        collector.run(collecting.clone()),
        &collecting,
        &fatal,
    );
    // Membership keeps renewing leases until the dispatcher has drained, so what was
    // recorded under them is published under them.
    let leasing = CancellationToken::new();
    let membership = match &backend {
        Backend::Postgres(postgres) => {
            let wake = Arc::new(Notify::new());
            let notices = supervise(
                "cluster notices",
                notices::listen(
                    postgres.clone(),
                    move |notice| match notice {
                        JobNotice::Changed(job) => timer_handle.job_changed(job),
                        JobNotice::Everything => timer_handle.reload_all(),
                    },
                    wake.clone(),
                    intake.clone(),
                ),
                &intake,
                &fatal,
            );
            let membership = Membership::new(
                postgres.clone(),
                ownership.clone(),
                config.cluster,
                config.http_addr.to_string(),
                wake,
            );
            let (stop, fatal) = (leasing.clone(), fatal.clone());
            let task = tokio::spawn(async move {
                let membership = membership.run(stop.clone()).await;
                if !stop.is_cancelled() {
                    fatal.cancel();
                }
                membership
            });
            Some((task, notices))
        }
        Backend::Sqlite(_) => None,
    };
    let timer = supervise("timer", timer.run(intake.clone()), &intake, &fatal);
    let notices = supervise(
        "dead-letter notices",
        dlq::notices::run(
            store.clone(),
            config.amqp_url.clone(),
            // With reply_users set messages are authenticated: a notice must come from a
            // task chimed published.
            config
                .reply_users
                .as_ref()
                .and_then(|_| chime_consumer::protocol::user_id::connection_user(&config.amqp_url)),
            intake.clone(),
        ),
        &intake,
        &fatal,
    );
    let sampler = supervise(
        "dead-letter sampler",
        dead_letters.sample(DLQ_SAMPLE_INTERVAL, intake.clone()),
        &intake,
        &fatal,
    );
    let reconciler = supervise(
        "reconciler",
        reconciler.run(intake.clone()),
        &intake,
        &fatal,
    );
    // Every node prunes: the batches are small and skip rows another node is deleting.
    let pruner = supervise("pruner", pruner.run(intake.clone()), &intake, &fatal);
    // Each node judges the jobs of the shards it owns (see `app::failure_watch`).
    let failure_watch = supervise(
        "pause-on-failure watch",
        failure_watch.run(intake.clone()),
        &intake,
        &fatal,
    );
    let http_stop = intake.clone();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let acceptor = tls.as_ref().map(tls::ServerTls::acceptor);
    let http = supervise(
        "http server",
        async move {
            http::serve_with_tls(
                listener,
                api::router(state).merge(console::router()),
                config.http,
                acceptor,
                http_stop,
            )
            .await;
        },
        &intake,
        &fatal,
    );
    let certificates = tls.map(|tls| {
        supervise(
            "https certificate reloader",
            tls.watch(intake.clone()),
            &intake,
            &fatal,
        )
    });
    info!(http = %config.http_addr, scheme, "chimed started");

    tokio::select! {
        () = shutdown => info!("shutting down: no new fires"),
        () = fatal.cancelled() => error!("a core task stopped; shutting down"),
    }
    intake.cancel();
    let _ = tokio::join!(
        timer,
        reconciler,
        pruner,
        failure_watch,
        notices,
        sampler,
        http
    );
    if let Some(certificates) = certificates {
        let _ = certificates.await;
    }
    info!("confirming in-flight publishes");
    drain.cancel();
    let _ = dispatcher.await;
    if let Some((membership, notices)) = membership {
        leasing.cancel();
        let _ = notices.await;
        match membership.await {
            Ok(membership) => membership.leave().await,
            Err(error) => error!(%error, "membership task failed; leases expire instead"),
        }
    }
    collecting.cancel();
    let _ = collector.await;
    drop(store);
    if fatal.is_cancelled() {
        anyhow::bail!("chimed stopped because a core task ended unexpectedly; see the log");
    }
    info!("chimed stopped");
    Ok(())
}

/// Runs a core task; if it ends before `stop` was cancelled, logs why and cancels `fatal`.
fn supervise(
    name: &'static str,
    task: impl Future<Output = ()> + Send + 'static,
    stop: &CancellationToken,
    fatal: &CancellationToken,
) -> JoinHandle<()> {
    let (stop, fatal) = (stop.clone(), fatal.clone());
    tokio::spawn(async move {
        let outcome = tokio::spawn(task).await;
        if !stop.is_cancelled() {
            match outcome {
                Err(error) if error.is_panic() => error!(task = name, %error, "core task panicked"),
                _ => error!(task = name, "core task ended unexpectedly"),
            }
            fatal.cancel();
        }
    })
}

/// This process's node id: the configured name (or the host name) and a random suffix,
/// so a restarted or duplicated node never inherits another process's leases.
fn node_id(name: &str) -> String {
    let name = if name.trim().is_empty() {
        gethostname::gethostname().to_string_lossy().into_owned()
    } else {
        name.trim().to_string()
    };
    let suffix: u32 = rand::random();
    format!("{name}-{suffix:08x}")
}
