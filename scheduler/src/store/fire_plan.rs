//! The fire transaction's decisions, without I/O, shared by both backends: which runs a
//! batch of locked jobs records and where each job's next fire time moves, and which
//! consumers count as live for zone jobs.

use std::collections::HashSet;

use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use super::types::{FireBatch, Firing, Misfire};
use crate::domain::{
    DeliveryMode, DueTask, Job, LiveZones, Run, WaitingFor, misfire::collapsed_fires,
};

/// How far back a presence message counts: consumers seen since then are live.
pub fn live_since(now: DateTime<Utc>) -> DateTime<Utc> {
    now - Duration::milliseconds(chime_consumer::protocol::PRESENCE_TTL_MS as i64)
}

/// Whether firing `job` needs the live zones (a zone job without its own list).
pub fn needs_live_zones(job: &Job) -> bool {
    let target = &job.spec.settings.target;
    target.mode == DeliveryMode::Zone && target.zones.is_none()
}

/// The jobs of a fire batch with unfinished runs (read only for jobs whose overlap
/// policy waits, see [`waiting_jobs`]).
#[derive(Debug, Default)]
pub(crate) struct Busy {
    /// Jobs with an unfinished run.
    pub running: HashSet<Uuid>,
    /// Those among them with a held `buffer_one` fire (`waiting_for: previous`).
    pub held: HashSet<Uuid>,
}

/// A fire transaction's plan: runs to insert and next fire times to write.
pub(crate) struct FirePlanBatch {
    /// Runs to insert, with their tasks.
    pub runs: Vec<(Run, DueTask)>,
    /// Jobs whose next fire time moves, and where to.
    pub advance: Vec<(Uuid, Option<DateTime<Utc>>)>,
    /// The timer's view, returned to the caller once the transaction commits.
    pub batch: FireBatch,
}

impl FirePlanBatch {
    /// The runs to insert, without their tasks.
    pub fn runs(&self) -> impl Iterator<Item = &Run> {
        self.runs.iter().map(|(run, _)| run)
    }

    /// What the fire did, once the runs in `inserted` were recorded (the others were
    /// recorded before) and the jobs in `fenced` were left out for want of a lease.
    /// Held runs (`waiting_for: previous`) are recorded but not handed on to publish.
    pub fn into_batch(self, inserted: &HashSet<Uuid>, fenced: Vec<Uuid>) -> FireBatch {
        let mut batch = self.batch;
        batch.fenced = fenced;
        batch.recorded = self
            .runs
            .into_iter()
            .filter(|(run, _)| inserted.contains(&run.id) && run.waiting_for.is_none())
            .map(|(_, task)| task)
            .collect();
        batch
    }
}

/// The jobs among `jobs` whose fires wait for their unfinished runs (overlap `forbid`
/// or `buffer_one`): only for these does a fire transaction read the runs.
pub(crate) fn waiting_jobs(jobs: &[Job]) -> Vec<Uuid> {
    jobs.iter()
        .filter(|job| job.spec.settings.overlap.waits())
        .map(|job| job.id)
        .collect()
}

/// Whether a fire of `jobs` needs the live zones (see [`needs_live_zones`]).
pub(crate) fn needs_any_live_zones(jobs: &[Job]) -> bool {
    jobs.iter().any(needs_live_zones)
}

/// Runs the locked job rows through [`Job::fires_due`]; shared by both backends' fire
/// transactions. `requested` ids with no row (deleted jobs) leave the timer. Jobs in
/// `busy` have an unfinished run: their overlap policy decides which due fires become
/// runs ([`crate::domain::OverlapPolicy::admits`]): `forbid` skips them, `buffer_one`
/// records one held run (`waiting_for: previous`, no `due_at`, not published) unless
/// one is held already; skipped fires are counted and the schedule still advances.
/// Fires are armed `firing.ahead` of time, except for jobs whose policy waits; runs are
/// stamped with `firing.node`.
pub(crate) fn plan_batch(
    requested: &[Uuid],
    jobs: &[Job],
    busy: &Busy,
    now: DateTime<Utc>,
    grace: Duration,
    firing: &Firing,
    live: &LiveZones,
) -> FirePlanBatch {
    let node = firing.node.as_str();
    let mut plan = FirePlanBatch {
        runs: Vec::new(),
        advance: Vec::new(),
        batch: FireBatch::default(),
    };
    for job in jobs {
        let overlap = job.spec.settings.overlap;
        let until = if overlap.waits() {
            now
        } else {
            now + firing.ahead
        };
        if overlap.waits() {
            plan.batch.unarmed.push(job.id);
        }
        let mut fires = job.fires_due(now, until, grace, live);
        if fires.runs.is_empty() && fires.fire_times > 0 && needs_live_zones(job) {
            plan.batch.skipped_no_zone.push(job.id);
        }
        let (dispatched, held) =
            overlap.admits(busy.running.contains(&job.id), busy.held.contains(&job.id));
        if admit(&mut fires.runs, dispatched, held) {
            plan.batch.skipped_overlap.push(job.id);
        }
        if let Some(due) = job
            .timer_entry()
            .filter(|due| *due < now && (fires.fire_times > 0 || fires.misfired))
        {
            plan.batch.late.push((job.id, due));
        }
        if let Some(due) = job.timer_entry().filter(|_| fires.misfired) {
            let settings = &job.spec.settings;
            plan.batch.misfired.push(Misfire {
                job: job.id,
                policy: settings.misfire,
                due,
                collapsed: collapsed_fires(&settings.schedule, due, now, fires.fire_times),
            });
        }
        if fires.next_fire_at != job.next_fire_at {
            plan.advance.push((job.id, fires.next_fire_at));
        }
        plan.batch
            .next_fire
            .push((job.id, fires.next_fire_at.filter(|_| !job.spec.paused)));
        plan.runs.extend(fires.runs.into_iter().map(|mut run| {
            run.fired_by = Some(node.to_string());
            let task = job.due_task(&run);
            (run, task)
        }));
    }
    for id in requested {
        if !jobs.iter().any(|job| job.id == *id) {
            plan.batch.next_fire.push((*id, None));
        }
    }
    plan
}

/// Keeps the runs of the first `dispatched` fire times of `runs` (in fire time order;
/// a fire may have several runs, one per item), then holds those of the next `held`
/// fire times (`waiting_for: previous`, no `due_at`), and drops the rest. Returns
/// whether any fire was dropped.
fn admit(runs: &mut Vec<Run>, dispatched: usize, held: usize) -> bool {
    let mut times: Vec<DateTime<Utc>> = runs.iter().map(|run| run.fire_time).collect();
    times.sort();
    times.dedup();
    let kept = dispatched.saturating_add(held);
    if times.len() <= dispatched {
        return false;
    }
    let dropped = times.len() > kept;
    runs.retain_mut(|run| {
        let index = times.partition_point(|t| *t < run.fire_time);
        if index >= dispatched && index < kept {
            run.waiting_for = Some(WaitingFor::Previous);
            run.due_at = None;
        }
        index < kept
    });
    dropped
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Timelike};

    use super::*;
    use crate::domain::{DeliveryMode, JobSettings, JobSpec, MisfirePolicy, OverlapPolicy};

    fn job(overlap: OverlapPolicy, now: DateTime<Utc>) -> Job {
        let mut settings = JobSettings::every_second(DeliveryMode::Group, 3);
        settings.overlap = overlap;
        let spec = JobSpec {
            app: "shop".into(),
            name: "tick".into(),
            paused: false,
            settings,
        };
        Job::new(spec, now - Duration::seconds(2))
    }

    fn firing(ahead: Duration) -> Firing {
        Firing {
            node: "node-a".into(),
            fence: None,
            ahead,
        }
    }

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 10).unwrap()
    }

    #[test]
    fn due_fires_become_runs_stamped_with_the_node() {
        let job = job(OverlapPolicy::Allow, now());
        let plan = plan_batch(
            &[job.id],
            std::slice::from_ref(&job),
            &Busy::default(),
            now(),
            Duration::seconds(60),
            &firing(Duration::zero()),
            &LiveZones::default(),
        );
        assert!(!plan.runs.is_empty());
        assert!(
            plan.runs()
                .all(|run| run.fired_by.as_deref() == Some("node-a"))
        );
        assert_eq!(plan.advance.len(), 1);
        let next = plan.advance[0].1.expect("an every-second job fires again");
        assert!(next > now() && next.nanosecond() == 0);
    }

    #[test]
    fn a_busy_forbid_job_skips_its_fire_and_is_not_armed() {
        let job = job(OverlapPolicy::Forbid, now());
        let busy = Busy {
            running: HashSet::from([job.id]),
            held: HashSet::new(),
        };
        let plan = plan_batch(
            &[job.id],
            std::slice::from_ref(&job),
            &busy,
            now(),
            Duration::seconds(60),
            &firing(Duration::seconds(5)),
            &LiveZones::default(),
        );
        assert!(plan.runs.is_empty());
        assert_eq!(plan.batch.skipped_overlap, vec![job.id]);
        assert_eq!(plan.batch.unarmed, vec![job.id]);
        assert_eq!(waiting_jobs(std::slice::from_ref(&job)), vec![job.id]);
    }

    #[test]
    fn a_misfire_carries_its_missed_due_time_and_the_fires_it_collapsed() {
        // A fire a second, due before `now()`: 30 s later it has missed one fire per
        // second since its due time, and the one at that time.
        let job = job(OverlapPolicy::Allow, now());
        let due = job.next_fire_at.expect("due");
        let late_now = now() + Duration::seconds(30);
        let missed = (late_now - due).num_seconds() as u64 + 1;
        let plan = plan_batch(
            &[job.id],
            std::slice::from_ref(&job),
            &Busy::default(),
            late_now,
            Duration::seconds(5),
            &firing(Duration::seconds(2)),
            &LiveZones::default(),
        );
        let batch = plan.batch;
        assert_eq!(
            batch.misfired,
            vec![Misfire {
                job: job.id,
                policy: MisfirePolicy::FireOnce,
                due,
                collapsed: missed - 1,
            }],
            "fire_once records one of the due fires"
        );
        assert_eq!(batch.late, vec![(job.id, due)]);

        // On time (armed ahead): neither late nor misfired.
        let early = due - Duration::milliseconds(500);
        let plan = plan_batch(
            &[job.id],
            std::slice::from_ref(&job),
            &Busy::default(),
            early,
            Duration::seconds(5),
            &firing(Duration::seconds(2)),
            &LiveZones::default(),
        );
        assert!(!plan.runs.is_empty());
        assert!(plan.batch.misfired.is_empty() && plan.batch.late.is_empty());
    }

    #[test]
    fn a_vanished_job_leaves_the_timer_and_only_inserted_runs_are_recorded() {
        let job = job(OverlapPolicy::Allow, now());
        let gone = Uuid::now_v7();
        let plan = plan_batch(
            &[job.id, gone],
            std::slice::from_ref(&job),
            &Busy::default(),
            now(),
            Duration::seconds(60),
            &firing(Duration::zero()),
            &LiveZones::default(),
        );
        let first = plan.runs().next().expect("a run").id;
        let batch = plan.into_batch(&HashSet::from([first]), vec![]);
        assert!(batch.next_fire.contains(&(gone, None)));
        assert_eq!(batch.recorded.len(), 1);
        assert_eq!(batch.recorded[0].task_id, first);
    }

    #[test]
    fn a_busy_buffer_one_job_holds_one_fire_then_skips() {
        let mut job = job(OverlapPolicy::BufferOne, now());
        // One fire due.
        job.next_fire_at = Some(now());
        let mut busy = Busy {
            running: HashSet::from([job.id]),
            held: HashSet::new(),
        };
        let fire = |busy: &Busy| {
            plan_batch(
                &[job.id],
                std::slice::from_ref(&job),
                busy,
                now(),
                Duration::seconds(60),
                &firing(Duration::seconds(5)),
                &LiveZones::default(),
            )
        };
        let plan = fire(&busy);
        assert_eq!(plan.runs.len(), 1, "one fire is held");
        let held = plan.runs().next().expect("a held run");
        assert_eq!(held.waiting_for, Some(WaitingFor::Previous));
        assert_eq!(held.due_at, None, "the reconciler leaves a held run alone");
        assert!(plan.batch.skipped_overlap.is_empty());
        assert_eq!(plan.batch.unarmed, vec![job.id]);
        let id = held.id;
        let batch = plan.into_batch(&HashSet::from([id]), vec![]);
        assert!(batch.recorded.is_empty(), "a held run is not published");

        busy.held.insert(job.id);
        let plan = fire(&busy);
        assert!(plan.runs.is_empty());
        assert_eq!(plan.batch.skipped_overlap, vec![job.id]);

        // Idle: the fire goes out as usual.
        let plan = fire(&Busy::default());
        assert_eq!(plan.runs.len(), 1);
        assert!(plan.runs().all(|run| run.waiting_for.is_none()));
    }

    #[test]
    fn admitting_fires_keeps_whole_fire_times() {
        let job = job(OverlapPolicy::BufferOne, now());
        let run = |second: i64, shard: u32| {
            Run::new(
                job.id,
                now() + Duration::seconds(second),
                crate::domain::RunTrigger::Schedule,
                serde_json::Value::Null,
                now(),
            )
            .item(DeliveryMode::Group, shard, 2, None)
        };
        // Three fire times of two items each, idle: the first goes out, the second is
        // held, the third is skipped.
        let mut runs: Vec<Run> = (0..3).flat_map(|s| [run(s, 0), run(s, 1)]).collect();
        assert!(admit(&mut runs, 1, 1));
        assert_eq!(runs.len(), 4);
        assert!(runs[..2].iter().all(|r| r.waiting_for.is_none()));
        assert!(
            runs[2..]
                .iter()
                .all(|r| r.waiting_for == Some(WaitingFor::Previous) && r.due_at.is_none())
        );
        let mut runs = vec![run(0, 0)];
        assert!(!admit(&mut runs, usize::MAX, 0));
        assert_eq!(runs.len(), 1);
        assert!(admit(&mut runs, 0, 0));
        assert!(runs.is_empty());
    }
}
