//! Bulk job import: `insert_jobs` stores a whole batch or nothing.

use super::*;

fn batch(prefix: &str, n: usize, now: DateTime<Utc>) -> Vec<Job> {
    (0..n)
        .map(|i| every_second(&format!("{prefix}-{i}"), now))
        .collect()
}

async fn count_jobs(store: &dyn Store) -> usize {
    store
        .search_jobs(&JobFilter {
            limit: 10_000,
            ..JobFilter::default()
        })
        .await
        .unwrap()
        .len()
}

pub(super) async fn insert_jobs_stores_every_job_of_a_batch(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    assert_eq!(store.insert_jobs(&[]).await.unwrap(), Vec::<usize>::new());
    let mut jobs = batch("bulk", 1_200, now);
    jobs[7].spec.paused = true;
    jobs[8].next_fire_at = None;
    assert_eq!(store.insert_jobs(&jobs).await.unwrap(), Vec::<usize>::new());
    for job in [&jobs[0], &jobs[7], &jobs[8], &jobs[1_199]] {
        assert_eq!(store.get_job(job.id).await.unwrap().as_ref(), Some(job));
    }
    assert_eq!(count_jobs(store).await, 1_200);
    // The batch is due like jobs created one by one (the paused and unscheduled ones not).
    let due = all_due(store, now + Duration::seconds(2), 500).await;
    assert_eq!(due.len(), 1_198);
    assert!(
        !due.iter()
            .any(|(id, _)| *id == jobs[7].id || *id == jobs[8].id)
    );
}

pub(super) async fn insert_jobs_with_a_taken_name_stores_nothing(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let existing = every_second("bulk-3", now);
    store.insert_job(&existing).await.unwrap();
    let jobs = batch("bulk", 10, now);
    // Against a stored job: only that index is named, and nothing of the batch is kept.
    assert_eq!(store.insert_jobs(&jobs).await.unwrap(), vec![3]);
    assert_eq!(count_jobs(store).await, 1);
    assert_eq!(store.get_job(jobs[0].id).await.unwrap(), None);
    // Within the batch: the later of the two is named.
    let mut twins = batch("twin", 4, now);
    twins[3].spec.name = "twin-1".into();
    assert_eq!(store.insert_jobs(&twins).await.unwrap(), vec![3]);
    assert_eq!(count_jobs(store).await, 1);
    // The same name in another app is not taken; the batch then goes in whole.
    let mut jobs = jobs;
    jobs[3].spec.app = "billing".into();
    assert_eq!(store.insert_jobs(&jobs).await.unwrap(), Vec::<usize>::new());
    assert_eq!(count_jobs(store).await, 11);
}
