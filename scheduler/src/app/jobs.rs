//! [`Jobs`]: every operation on jobs — create, read, list, update, delete, pause, resume,
//! trigger and preview. The HTTP API (and through it `chimectl` and the console) calls these and
//! nothing below them, so a rule about jobs (a permission, an audit entry, a quota) is
//! written once, here.
//!
//! # The job-change protocol
//!
//! A change of a stored job (an update, a pause or resume, a delete) runs one protocol,
//! written once, in `Jobs::whole_change`:
//!
//! 1. **Begin** the change with the dispatcher ([`DispatchHandle::begin_change`]) before
//!    the transaction. From then on this node's dispatcher holds the job's due tasks
//!    back, and the change's instant ([`ChangeGuard::since`]) splits the job's fires:
//!    those up to it may already be published, those after it are the change's to
//!    withdraw (see [`crate::dispatch`]'s `changes` module for why this fence is needed).
//! 2. **Write** the change to the store, as of that instant (the store deletes the
//!    `scheduled` runs of withdrawn fires and, when the schedule changed or the job
//!    resumed, rewinds the next fire).
//! 3. **Hand the guard to the timer** ([`TimerHandle::change_done`]), committed or not:
//!    the timer reloads the job and passes the guard on to the dispatcher after any fire
//!    it recorded before hearing of the change, so those tasks are checked too.
//! 4. The dispatcher marks the job's waiting tasks to be checked against the store and
//!    **lifts the guard**; tasks whose runs were withdrawn are dropped there. A guard
//!    dropped on any other path goes to the dispatcher directly, so no change is ever
//!    left in progress.
//!
//! The whole protocol runs on a task of its own, so a request dropped halfway (a client
//! that disconnects) cannot stop a change between its steps. Creating a job needs no
//! fence (it has no armed fires yet): the timer is told, and the job's queues declared.
//!
//! # Bulk creation
//!
//! [`Jobs::create_many`] creates up to [`MAX_BATCH_JOBS`] jobs all or none: every job is
//! checked as [`Jobs::create`] checks one ([`check_new`], which also refuses a name used
//! twice in the batch), the batch is stored in one transaction ([`Store::insert_jobs`]),
//! the timer reloads its window once (or is told of each job of a small batch), and each
//! distinct target's queues are declared once.
//!
//! A manual trigger is not a change: it records the fire's runs (stamped `fired_by` this
//! node) and submits their tasks to the dispatcher.

use std::{
    collections::{HashMap, HashSet},
    future::Future,
    sync::Arc,
};

use chrono::{DateTime, Utc};
use tracing::{error, warn};
use uuid::Uuid;

use super::audit::{self, job_entry, job_target};
use super::runs::{Fire, fire_items};
use crate::{
    broker::GroupDeclarer,
    dispatch::{ChangeGuard, DispatchHandle},
    domain::{
        FieldError, Job, JobFilter, JobSpec, LiveZones, RunTrigger,
        access::{Action, Caller, Denied},
        audit::{AuditEntry, actions},
        job::reschedules,
        limits::MAX_BATCH_JOBS,
        preview::{self, Preview},
        quota::{QuotaExceeded, Quotas},
        schedule::{Schedule, ScheduleSpec},
    },
    store::{Store, StoreError, live_since, needs_live_zones},
    telemetry,
    timer::TimerHandle,
};

/// Up to this many jobs, a batch's jobs are announced to the timer one by one (each
/// reload reads one job); a larger batch has it reload its whole window once instead.
const ANNOUNCE_EACH_UP_TO: usize = 64;

/// How long a target this node declared is not declared again.
const DECLARED_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// The most targets remembered as declared.
const DECLARED_KEPT: usize = 10_000;

/// A job's target as far as its queues go: its group and its own zones.
type QueueTarget = (String, Vec<String>);

/// How many times an update without an expected version is tried when other changes
/// keep landing between its read and its write.
const UPDATE_ATTEMPTS: u32 = 3;

/// Why a job operation failed.
#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    /// No job has this id.
    #[error("no job with id {0}")]
    NotFound(Uuid),
    /// The caller may not do this (its role, or the job's app).
    #[error(transparent)]
    Denied(#[from] Denied),
    /// The change would take the app over one of its quotas.
    #[error(transparent)]
    Quota(#[from] QuotaExceeded),
    /// The job definition is invalid (for example a cron expression that never fires).
    #[error(transparent)]
    Invalid(#[from] FieldError),
    /// Another job has this app and name.
    #[error("a job named {name:?} already exists in app {app:?}")]
    DuplicateName {
        /// The app.
        app: String,
        /// The name.
        name: String,
    },
    /// The job changed since the version the caller named.
    #[error("the job is at version {current}, not {expected}")]
    VersionConflict {
        /// The version the caller named.
        expected: i64,
        /// The stored version.
        current: i64,
    },
    /// A backfill with overlap `forbid` found the job with an unfinished run.
    #[error(
        "job {0} has an unfinished run; a backfill with overlap \"forbid\" waits until it finishes"
    )]
    Busy(Uuid),
    /// A zone job without its own zones has no zone with live consumers to fire in.
    #[error("no zone of group {group:?} has live consumers to run the fire")]
    NoLiveZone {
        /// The job's group.
        group: String,
    },
    /// The task carrying a change ended without an outcome (it panicked).
    #[error("the job change failed: {0}")]
    ChangeFailed(String),
    /// The store failed.
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for JobsError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::DuplicateName { app, name } => Self::DuplicateName { app, name },
            StoreError::VersionConflict {
                expected, current, ..
            } => Self::VersionConflict { expected, current },
            StoreError::JobNotFound(id) => Self::NotFound(id),
            other => Self::Store(other),
        }
    }
}

/// Why a batch of new jobs ([`Jobs::create_many`]) was refused. Nothing of it was stored.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// The batch is empty or has more than [`MAX_BATCH_JOBS`] jobs.
    #[error("a batch takes 1 to {MAX_BATCH_JOBS} jobs, not {0}")]
    Size(usize),
    /// These jobs, by index in the batch, are refused: every one found, in index order.
    #[error("{} jobs of the batch are refused{}", .0.len(), .0.first().map(|(i, e)| format!(", the first (index {i}): {e}")).unwrap_or_default())]
    Items(Vec<(usize, JobsError)>),
    /// The batch could not be stored (the store failed).
    #[error(transparent)]
    Failed(#[from] JobsError),
}

/// Checks that a batch of `count` jobs may be created at all: 1 to [`MAX_BATCH_JOBS`].
pub fn check_batch_size(count: usize) -> Result<(), BatchError> {
    if (1..=MAX_BATCH_JOBS).contains(&count) {
        Ok(())
    } else {
        Err(BatchError::Size(count))
    }
}

/// Checks new jobs, each by its index in a batch, as [`Jobs::create`] checks one (the
/// schedule must fire after `now`), and that no app and name comes twice (the later is
/// refused). Returns every refused index with why, in the order given.
pub fn check_new<'a>(
    specs: impl IntoIterator<Item = (usize, &'a JobSpec)>,
    now: DateTime<Utc>,
) -> Vec<(usize, JobsError)> {
    let mut names = HashSet::new();
    let mut refused = Vec::new();
    for (index, spec) in specs {
        if let Err(error) = check_one(spec, now) {
            refused.push((index, error));
        } else if !names.insert((spec.app.as_str(), spec.name.as_str())) {
            refused.push((index, duplicate(spec)));
        }
    }
    refused
}

/// What [`Jobs::create`] checks of a new job beyond its parsing: that it fires after `now`.
fn check_one(spec: &JobSpec, now: DateTime<Utc>) -> Result<(), JobsError> {
    Ok(spec.settings.schedule.check_fires(now)?)
}

fn duplicate(spec: &JobSpec) -> JobsError {
    JobsError::DuplicateName {
        app: spec.app.clone(),
        name: spec.name.clone(),
    }
}

/// The operations on jobs. Cheap to share.
pub struct Jobs {
    pub(super) store: Arc<dyn Store>,
    /// This node's id, stamped as `fired_by` on manually triggered and backfilled runs.
    pub(super) node: String,
    timer: TimerHandle,
    pub(super) dispatch: DispatchHandle,
    declarer: GroupDeclarer,
    /// Targets (group, zones) this node declared lately: a create or change for one of
    /// them declares nothing again (see `declare_target`).
    declared: std::sync::Mutex<HashMap<QueueTarget, std::time::Instant>>,
    /// Per-app limits on jobs and groups.
    quotas: Quotas,
}

impl Jobs {
    /// Jobs kept in `store`, on node `node`, whose changes go to this node's `timer` and
    /// `dispatch`er, and whose queues `declarer` declares.
    pub fn new(
        store: Arc<dyn Store>,
        node: impl Into<String>,
        timer: TimerHandle,
        dispatch: DispatchHandle,
        declarer: GroupDeclarer,
    ) -> Self {
        Self {
            store,
            node: node.into(),
            timer,
            dispatch,
            declarer,
            declared: Default::default(),
            quotas: Quotas::default(),
        }
    }

    /// The store the jobs are kept in.
    pub(super) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The same service enforcing `quotas` instead of the defaults.
    pub fn with_quotas(mut self, quotas: Quotas) -> Self {
        self.quotas = quotas;
        self
    }

    /// Whether app `app` may gain `new_jobs` jobs targeting `groups`, within its quotas.
    /// Checked before the write: two changes racing on different nodes may each pass and
    /// together go over by one, which a quota (a guard against runaway use) allows.
    async fn check_quotas<'a>(
        &self,
        app: &str,
        new_jobs: u64,
        groups: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), JobsError> {
        if new_jobs > 0 && self.quotas.max_jobs > 0 {
            let jobs = self.store.count_app_jobs(app).await?;
            self.quotas.check_jobs(app, jobs + new_jobs)?;
        }
        if self.quotas.max_groups > 0 {
            let groups: HashSet<&str> = groups.into_iter().collect();
            let mut unused = Vec::new();
            for group in &groups {
                if !self.store.app_uses_group(app, group).await? {
                    unused.push(*group);
                }
            }
            if !unused.is_empty() {
                let used = self.store.app_groups(app).await?.len() as u64;
                self.quotas.check_groups(app, used + unused.len() as u64)?;
            }
        }
        Ok(())
    }

    /// Job `id`.
    pub async fn get(&self, caller: &Caller, id: Uuid) -> Result<Job, JobsError> {
        self.job_for(caller, Action::ReadJobs, id).await
    }

    /// Job `id`'s next fires (`count`: see [`preview::check_count`]), from its next fire
    /// time; for a paused job, from the first point of its schedule after now (what it
    /// would fire once resumed). Also the job, for its `paused` flag.
    pub async fn preview(
        &self,
        caller: &Caller,
        id: Uuid,
        count: Option<u32>,
    ) -> Result<(Job, Preview), JobsError> {
        let count = preview::check_count(count)?;
        let job = self.job_for(caller, Action::ReadJobs, id).await?;
        let schedule = &job.spec.settings.schedule;
        let now = Utc::now();
        let first = match job.next_fire_at {
            Some(next) if job.spec.paused && next < now => schedule.next_after(next, now),
            next => next,
        };
        let preview = preview::upcoming(
            schedule,
            &job.spec.settings.window,
            Some(job.id),
            first,
            count,
        );
        Ok((job, preview))
    }

    /// The next fires of a schedule not yet saved, as if a job with it and `window` were
    /// created now. Any token may ask: it reads nothing stored.
    pub fn preview_schedule(
        &self,
        caller: &Caller,
        spec: &ScheduleSpec,
        window: &crate::domain::Window,
        count: Option<u32>,
    ) -> Result<Preview, JobsError> {
        caller.check(Action::ReadJobs, None)?;
        let count = preview::check_count(count)?;
        let schedule = Schedule::from_spec(spec)?;
        let now = Utc::now();
        schedule.check_fires(now)?;
        Ok(preview::for_new_schedule(&schedule, window, now, count))
    }

    /// Job `id`, if `caller` may perform `action` on its app.
    pub(super) async fn job_for(
        &self,
        caller: &Caller,
        action: Action,
        id: Uuid,
    ) -> Result<Job, JobsError> {
        caller.check(action, None)?;
        let job = self
            .store
            .get_job(id)
            .await?
            .ok_or(JobsError::NotFound(id))?;
        caller.check(action, Some(&job.spec.app))?;
        Ok(job)
    }

    /// A page of the job list (`filter`: its filters, order and position): of the app
    /// it names if any (refused when outside the caller's apps), else of every app the
    /// caller may read.
    pub async fn list(&self, caller: &Caller, filter: &JobFilter) -> Result<Vec<Job>, JobsError> {
        caller.check(Action::ReadJobs, None)?;
        for app in filter.apps.iter().flatten() {
            caller.check(Action::ReadJobs, Some(app))?;
        }
        let mut filter = filter.clone();
        if filter.apps.is_none() {
            filter.apps = caller.visible_apps();
        }
        Ok(self.store.search_jobs(&filter).await?)
    }

    /// Stores a new job of `spec`, tells the timer and declares its queues.
    pub async fn create(&self, caller: &Caller, spec: JobSpec) -> Result<Job, JobsError> {
        caller.check(Action::ChangeJobs, Some(&spec.app))?;
        let now = Utc::now();
        check_one(&spec, now)?;
        self.check_quotas(&spec.app, 1, [spec.settings.target.group.as_str()])
            .await?;
        let job = Job::new(spec, now);
        self.store.insert_job(&job).await?;
        self.timer.job_changed(job.id);
        self.declare_target(&job).await;
        audit::record(
            self.store.as_ref(),
            vec![job_entry(caller, actions::JOB_CREATE, &job)],
        )
        .await;
        Ok(job)
    }

    /// Stores new jobs of `specs`, all or none (see the module documentation): answers
    /// them in the order given, or every job refused, by index.
    pub async fn create_many(
        &self,
        caller: &Caller,
        specs: Vec<JobSpec>,
    ) -> Result<Vec<Job>, BatchError> {
        caller
            .check(Action::ChangeJobs, None)
            .map_err(JobsError::from)?;
        check_batch_size(specs.len())?;
        let denied: Vec<(usize, JobsError)> = specs
            .iter()
            .enumerate()
            .filter_map(|(i, spec)| {
                let denied = caller.check(Action::ChangeJobs, Some(&spec.app)).err()?;
                Some((i, JobsError::Denied(denied)))
            })
            .collect();
        if !denied.is_empty() {
            return Err(BatchError::Items(denied));
        }
        let now = Utc::now();
        let refused = check_new(specs.iter().enumerate(), now);
        if !refused.is_empty() {
            return Err(BatchError::Items(refused));
        }
        let mut by_app: HashMap<&str, (u64, Vec<&str>)> = HashMap::new();
        for spec in &specs {
            let entry = by_app.entry(spec.app.as_str()).or_default();
            entry.0 += 1;
            entry.1.push(spec.settings.target.group.as_str());
        }
        for (app, (jobs, groups)) in by_app {
            self.check_quotas(app, jobs, groups).await?;
        }
        let jobs: Vec<Job> = specs.into_iter().map(|spec| Job::new(spec, now)).collect();
        let taken = self
            .store
            .insert_jobs(&jobs)
            .await
            .map_err(JobsError::from)?;
        if !taken.is_empty() {
            return Err(BatchError::Items(
                taken
                    .into_iter()
                    .map(|i| (i, duplicate(&jobs[i].spec)))
                    .collect(),
            ));
        }
        if jobs.len() <= ANNOUNCE_EACH_UP_TO {
            for job in &jobs {
                self.timer.job_changed(job.id);
            }
        } else {
            self.timer.reload_all();
        }
        let mut targets = HashMap::new();
        for job in &jobs {
            let target = &job.spec.settings.target;
            targets.entry((&target.group, &target.zones)).or_insert(job);
        }
        for job in targets.into_values() {
            self.declare_target(job).await;
        }
        let entries = jobs
            .iter()
            .map(|job| job_entry(caller, actions::JOB_CREATE, job))
            .collect();
        audit::record(self.store.as_ref(), entries).await;
        Ok(jobs)
    }

    /// Replaces job `id`'s definition with what `edit` makes of the current job. With
    /// `expected`, the change fails with [`JobsError::VersionConflict`] if the job is at
    /// another version; without, a concurrent change is not the caller's conflict: the
    /// job is read again and `edit` applied over the newer one (up to 3 tries). A new
    /// schedule must fire at least once after now; a new target gets its queues declared.
    ///
    /// `edit`'s own error type lets the edge refuse an edit in its own terms (a bad field
    /// of a request body); every failure here converts into it.
    pub async fn update<E>(
        &self,
        caller: &Caller,
        id: Uuid,
        expected: Option<i64>,
        mut edit: impl FnMut(&Job) -> Result<JobSpec, E>,
    ) -> Result<Job, E>
    where
        E: From<JobsError>,
    {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let current = self.job_for(caller, Action::ChangeJobs, id).await?;
            let spec = edit(&current)?;
            // Moving a job to another app needs the right on both.
            caller
                .check(Action::ChangeJobs, Some(&spec.app))
                .map_err(JobsError::from)?;
            if spec.settings.schedule != current.spec.settings.schedule {
                spec.settings
                    .schedule
                    .check_fires(Utc::now())
                    .map_err(JobsError::from)?;
            }
            let target_changed = spec.settings.target != current.spec.settings.target;
            if spec.app != current.spec.app || target_changed {
                let new_jobs = u64::from(spec.app != current.spec.app);
                self.check_quotas(&spec.app, new_jobs, [spec.settings.target.group.as_str()])
                    .await?;
            }
            match self
                .change(&current, expected.unwrap_or(current.version), spec)
                .await
            {
                Ok(stored) => {
                    if target_changed {
                        self.declare_target(&stored).await;
                    }
                    let entry = job_entry(caller, actions::JOB_UPDATE, &stored);
                    audit::record(self.store.as_ref(), vec![entry]).await;
                    return Ok(stored);
                }
                Err(JobsError::VersionConflict { .. })
                    if expected.is_none() && attempts < UPDATE_ATTEMPTS => {}
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// Deletes job `id` and its run history; it stops firing at once.
    pub async fn delete(&self, caller: &Caller, id: Uuid) -> Result<(), JobsError> {
        let job = self.job_for(caller, Action::ChangeJobs, id).await?;
        let deleted = self
            .whole_change(id, move |store, _since| async move {
                store.delete_job(id).await
            })
            .await?;
        if deleted {
            let entry = AuditEntry::now(
                &caller.name,
                actions::JOB_DELETE,
                job_target(id),
                Some(&job.spec.app),
                serde_json::json!({"app": job.spec.app, "name": job.spec.name, "version": job.version}),
            );
            audit::record(self.store.as_ref(), vec![entry]).await;
            Ok(())
        } else {
            Err(JobsError::NotFound(id))
        }
    }

    /// Pauses job `id` (a paused job does not fire); a paused job is answered as it is.
    pub async fn pause(&self, caller: &Caller, id: Uuid) -> Result<Job, JobsError> {
        self.set_paused(caller, id, true).await
    }

    /// Resumes job `id`, its next fire computed from now; a running job is answered as
    /// it is.
    pub async fn resume(&self, caller: &Caller, id: Uuid) -> Result<Job, JobsError> {
        self.set_paused(caller, id, false).await
    }

    /// Fires job `id` now (even when paused), as runs with trigger `manual` (one per
    /// item, see [`crate::domain::Target::items`]) stamped `fired_by` this node, and
    /// submits their tasks. Answers the fire as stored, through its first item: a second
    /// trigger in the same millisecond answers the first one's runs. A zone job with no
    /// zone to run in records nothing and fails with [`JobsError::NoLiveZone`].
    pub async fn trigger(&self, caller: &Caller, id: Uuid) -> Result<Fire, JobsError> {
        let job = self.job_for(caller, Action::TriggerJobs, id).await?;
        let now = Utc::now();
        let live = if needs_live_zones(&job) {
            self.store.live_zones(live_since(now)).await?
        } else {
            LiveZones::default()
        };
        let mut runs = job.new_runs(now, RunTrigger::Manual, now, &live);
        if runs.is_empty() {
            return Err(JobsError::NoLiveZone {
                group: job.spec.settings.target.group.clone(),
            });
        }
        let mut recorded = Vec::new();
        for run in &mut runs {
            run.fired_by = Some(self.node.clone());
            if self.store.insert_run(run).await? {
                recorded.push(job.due_task(run));
            }
        }
        if !recorded.is_empty() {
            metrics::counter!(telemetry::FIRES, "trigger" => "manual").increment(1);
            self.dispatch.submit(recorded);
        }
        let first = runs.swap_remove(0);
        let items = fire_items(self.store.as_ref(), &first).await?;
        let run = items
            .iter()
            .find(|item| item.id == first.id)
            .cloned()
            .unwrap_or(first);
        let entry = AuditEntry::now(
            &caller.name,
            actions::JOB_TRIGGER,
            job_target(job.id),
            Some(&job.spec.app),
            serde_json::json!({"run_id": run.id, "items": items.len()}),
        );
        audit::record(self.store.as_ref(), vec![entry]).await;
        Ok(Fire { run, items })
    }

    async fn set_paused(&self, caller: &Caller, id: Uuid, paused: bool) -> Result<Job, JobsError> {
        let current = self.job_for(caller, Action::ChangeJobs, id).await?;
        if current.spec.paused == paused {
            return Ok(current);
        }
        let mut spec = current.spec.clone();
        spec.paused = paused;
        let stored = self.change(&current, current.version, spec).await?;
        let action = if paused {
            actions::JOB_PAUSE
        } else {
            actions::JOB_RESUME
        };
        audit::record(
            self.store.as_ref(),
            vec![job_entry(caller, action, &stored)],
        )
        .await;
        Ok(stored)
    }

    /// Stores `spec` as the new definition of `current` if it is still at `expected`.
    async fn change(&self, current: &Job, expected: i64, spec: JobSpec) -> Result<Job, JobsError> {
        let set_next_fire = reschedules(&current.spec, &spec);
        let current = current.clone();
        self.whole_change(current.id, move |store, since| async move {
            let updated = current.updated(spec, since);
            store.update_job(&updated, expected, set_next_fire).await
        })
        .await
    }

    /// Runs a change of `job` — `write`, given the store and the change's instant —
    /// through the job-change protocol (see the module documentation), on a task of its
    /// own so that a dropped request cannot stop it halfway.
    pub(super) async fn whole_change<T, F, Fut>(&self, job: Uuid, write: F) -> Result<T, JobsError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<dyn Store>, DateTime<Utc>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let store = self.store.clone();
        let (dispatch, timer) = (self.dispatch.clone(), self.timer.clone());
        let task = tokio::spawn(async move {
            let change: ChangeGuard = dispatch.begin_change(job);
            let written = write(store, change.since()).await;
            timer.change_done(change);
            written
        });
        match task.await {
            Ok(written) => Ok(written?),
            Err(failed) => {
                error!(error = %failed, %job, "a job change failed");
                Err(JobsError::ChangeFailed(failed.to_string()))
            }
        }
    }

    /// Declares the job's work queue so its tasks wait in RabbitMQ while no consumer runs.
    /// A broker outage does not fail the operation: the dispatcher declares again before
    /// the first publish. A target this node declared within the last
    /// [`DECLARED_FOR`] is not declared again: every declaration goes through one
    /// channel, several round trips each, and creates of jobs for one group would
    /// otherwise queue behind each other's (under load, a few creates a second).
    async fn declare_target(&self, job: &Job) {
        let target = &job.spec.settings.target;
        let group = &target.group;
        let zones = target.zones.as_deref().unwrap_or_default();
        let key: QueueTarget = (group.clone(), zones.to_vec());
        if self.declared_lately(&key) {
            return;
        }
        match self.declarer.declare(group, zones).await {
            Ok(()) => self.note_declared(key),
            Err(error) => {
                warn!(%error, group, job = %job.id, "could not declare the job's queue now; the dispatcher will");
            }
        }
    }

    fn declared_lately(&self, key: &QueueTarget) -> bool {
        let declared = self.declared.lock().unwrap_or_else(|e| e.into_inner());
        declared
            .get(key)
            .is_some_and(|at| at.elapsed() < DECLARED_FOR)
    }

    fn note_declared(&self, key: QueueTarget) {
        let mut declared = self.declared.lock().unwrap_or_else(|e| e.into_inner());
        if declared.len() >= DECLARED_KEPT {
            declared.retain(|_, at| at.elapsed() < DECLARED_FOR);
        }
        if declared.len() < DECLARED_KEPT {
            declared.insert(key, std::time::Instant::now());
        }
    }
}
