//! Moving overdue runs on to their next attempt. A run that missed its ack or run
//! deadline is published again as attempt + 1, or given up (`dead`) when its attempts
//! ran out ([`crate::domain::retry::after_timeout`]); a `failed` run whose backoff
//! elapsed is published as its next attempt. The store moves a page's runs in one call,
//! each conditional on its state and attempt, and only those it moved are published (a
//! reply that arrived meanwhile wins).

use chime_consumer::protocol::AttemptRecord;
use chrono::{DateTime, Utc};
use tracing::warn;

use super::report::PassReport;
use crate::{
    dispatch::DispatchHandle,
    domain::{
        RunState,
        retry::{Missed, TimeoutVerdict, after_timeout},
    },
    store::{Expect, NextAttempt, OverdueRun, Store, StoreError},
    telemetry,
};

/// An overdue run to publish as its next attempt once the store has moved it.
pub(super) struct Advance {
    item: OverdueRun,
    /// What its history notes (a timeout), if anything.
    record: Option<AttemptRecord>,
    counted: Counted,
}

impl Advance {
    /// A failed run whose backoff elapsed.
    pub(super) fn retry(item: OverdueRun) -> Self {
        Self {
            item,
            record: None,
            counted: Counted::Retry,
        }
    }
}

/// Which metric a moved run counts towards.
#[derive(Clone, Copy)]
enum Counted {
    /// `chime_republishes_total{reason}`: a missed deadline.
    Republish(&'static str),
    /// `chime_retries_total`: a failed attempt's backoff elapsed.
    Retry,
}

/// A run missed its ack or run deadline: the next attempt (added to `advances`), or
/// `dead` (given up in the store at once, and added to `dead` for its dead letter).
pub(super) async fn timed_out(
    store: &dyn Store,
    mut item: OverdueRun,
    missed: Missed,
    now: DateTime<Utc>,
    report: &mut PassReport,
    advances: &mut Vec<Advance>,
    dead: &mut Vec<OverdueRun>,
) -> Result<(), StoreError> {
    let run = &item.run;
    let limit = match missed {
        Missed::Ack => run.ack_timeout,
        Missed::Run => run.run_timeout,
    };
    let expect = Expect::exactly(run.state, run.attempt);
    let verdict = after_timeout(
        missed,
        run.attempt,
        limit,
        run.consumer.as_deref(),
        item.job.spec.settings.max_attempts,
        now,
    );
    match verdict {
        TimeoutVerdict::Republish { record } => advances.push(Advance {
            item,
            record: Some(record),
            counted: Counted::Republish(missed.event()),
        }),
        TimeoutVerdict::Dead { reason, record } => {
            if store
                .kill_run(run.id, expect, &reason, Some(&record), false, now)
                .await?
            {
                warn!(run_id = %run.id, job = %item.job.spec.name, %reason, "run given up");
                metrics::counter!(telemetry::DEAD_RUNS, "reason" => missed.event()).increment(1);
                item.run.state = RunState::Dead;
                item.run.error = Some(reason);
                item.run.history.push(record);
                report.killed += 1;
                dead.push(item);
            }
        }
    }
    Ok(())
}

/// Moves `advances` to their next attempt in one store call and hands `dispatch` those
/// still as they were read (a reply that arrived meanwhile wins).
pub(super) async fn advance(
    store: &dyn Store,
    dispatch: &DispatchHandle,
    advances: Vec<Advance>,
    now: DateTime<Utc>,
    report: &mut PassReport,
) -> Result<(), StoreError> {
    let runs: Vec<NextAttempt<'_>> = advances
        .iter()
        .map(|a| NextAttempt {
            run_id: a.item.run.id,
            expect: Expect::exactly(a.item.run.state, a.item.run.attempt),
            record: a.record.as_ref(),
        })
        .collect();
    let moved = store.next_attempts(&runs, now).await?;
    let mut tasks = Vec::with_capacity(moved.len());
    for Advance {
        mut item, counted, ..
    } in advances
    {
        if !moved.contains(&item.run.id) {
            continue;
        }
        match counted {
            Counted::Republish(reason) => {
                metrics::counter!(telemetry::REPUBLISHES, "reason" => reason).increment(1);
                report.count_republished(reason);
            }
            Counted::Retry => {
                metrics::counter!(telemetry::RETRIES).increment(1);
                report.count_republished("retry");
            }
        }
        item.run.attempt += 1;
        tasks.push(item.job.due_task(&item.run));
    }
    dispatch.resubmit(tasks);
    Ok(())
}
