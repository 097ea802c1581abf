//! Pause on failure: which jobs the store finds tripped (`Store::failing_jobs`), and the
//! `paused_reason` a job update keeps and a resume clears.

use super::*;

/// A finished run of `job` fired at `fire_time`, recorded at `created`, in `state`.
fn finished(job: &Job, fire_time: DateTime<Utc>, created: DateTime<Utc>, state: RunState) -> Run {
    let mut run = Run::new(
        job.id,
        fire_time,
        RunTrigger::Schedule,
        json!(null),
        created,
    );
    run.state = state;
    run.finished_at = Some(created + Duration::seconds(1));
    run.due_at = None;
    run
}

fn pausing(name: &str, limit: u32, now: DateTime<Utc>) -> Job {
    let mut spec = spec(name, json!({"every": "1m"}));
    spec.settings.pause_after_failures = Some(limit);
    Job::new(spec, now)
}

pub(super) async fn failing_jobs_are_those_whose_newest_finished_runs_all_died(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let at = |s: i64| now + Duration::seconds(s);
    // Three dead runs in a row, the newest fire last: tripped.
    let failing = pausing("failing", 3, now);
    // Dead, dead, then a success (newest): not tripped.
    let recovered = pausing("recovered", 2, now);
    // Two dead runs of three needed, and one still running: not tripped.
    let short = pausing("short", 3, now);
    // Dead runs, but the job does not pause on failure.
    let plain = Job::new(spec("plain", json!({"every": "1m"})), now);
    for job in [&failing, &recovered, &short, &plain] {
        store.insert_job(job).await.unwrap();
    }
    for i in 1..=3 {
        let run = finished(&failing, at(i * 60), at(i * 60), RunState::Dead);
        store.insert_run(&run).await.unwrap();
        let run = finished(&plain, at(i * 60), at(i * 60), RunState::Dead);
        store.insert_run(&run).await.unwrap();
    }
    for (i, state) in [RunState::Dead, RunState::Dead, RunState::Succeeded]
        .into_iter()
        .enumerate()
    {
        let s = (i as i64 + 1) * 60;
        let run = finished(&recovered, at(s), at(s), state);
        store.insert_run(&run).await.unwrap();
    }
    for i in 1..=2 {
        let run = finished(&short, at(i * 60), at(i * 60), RunState::Dead);
        store.insert_run(&run).await.unwrap();
    }
    // A failed attempt waiting for its retry is not final: it counts for nothing.
    let mut retrying = finished(&short, at(180), at(180), RunState::Failed);
    retrying.due_at = Some(at(300));
    store.insert_run(&retrying).await.unwrap();

    let found = store.failing_jobs(None).await.unwrap();
    let ids: Vec<Uuid> = found.iter().map(|job| job.id).collect();
    assert_eq!(ids, vec![failing.id]);
    assert_eq!(found[0].spec.settings.pause_after_failures, Some(3));

    // Only the shards asked for.
    let shard = shard_of(failing.id, DEFAULT_SHARD_COUNT);
    let other = (shard + 1) % DEFAULT_SHARD_COUNT;
    assert_eq!(store.failing_jobs(Some(&[shard])).await.unwrap().len(), 1);
    assert!(store.failing_jobs(Some(&[other])).await.unwrap().is_empty());
    assert!(store.failing_jobs(Some(&[])).await.unwrap().is_empty());

    // Pausing it with a reason: it is no longer a candidate, and the reason is stored.
    let mut paused_spec = failing.spec.clone();
    paused_spec.paused = true;
    let mut paused = failing.updated(paused_spec, at(200));
    paused.paused_reason = Some("tripped".into());
    let stored = store.update_job(&paused, 1, false).await.unwrap();
    assert_eq!(stored.paused_reason.as_deref(), Some("tripped"));
    let read = store.get_job(failing.id).await.unwrap().unwrap();
    assert_eq!(read.paused_reason.as_deref(), Some("tripped"));
    assert!(store.failing_jobs(None).await.unwrap().is_empty());

    // An edit while paused keeps the reason; resuming clears it and starts the count
    // anew: the dead runs recorded before the resume no longer count.
    let mut edited_spec = read.spec.clone();
    edited_spec.settings.max_attempts = 2;
    let edited = store
        .update_job(&read.updated(edited_spec, at(210)), read.version, false)
        .await
        .unwrap();
    assert_eq!(edited.paused_reason.as_deref(), Some("tripped"));
    let mut resumed_spec = edited.spec.clone();
    resumed_spec.paused = false;
    let resumed = store
        .update_job(&edited.updated(resumed_spec, at(220)), edited.version, true)
        .await
        .unwrap();
    assert_eq!(resumed.paused_reason, None);
    assert_eq!(
        store
            .get_job(failing.id)
            .await
            .unwrap()
            .unwrap()
            .paused_reason,
        None
    );
    assert!(store.failing_jobs(None).await.unwrap().is_empty());

    // Three new dead runs after the resume trip it again.
    for i in 4..=6 {
        let run = finished(&failing, at(i * 60), at(i * 60), RunState::Dead);
        store.insert_run(&run).await.unwrap();
    }
    let again: Vec<Uuid> = store
        .failing_jobs(None)
        .await
        .unwrap()
        .iter()
        .map(|job| job.id)
        .collect();
    assert_eq!(again, vec![failing.id]);
}
