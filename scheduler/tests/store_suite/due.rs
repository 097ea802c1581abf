//! The timer's look-ahead query (`due_jobs`), and the shard filters of the timer's and
//! the reconciler's queries.

use super::*;

pub(super) async fn due_jobs_pages_by_time_and_skips_paused(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let a = every_second("a", now);
    let b = Job::new(spec("b", json!({"every": "2s"})), now);
    let far = Job::new(spec("far", json!({"every": "1h"})), now);
    let mut paused = every_second("paused", now);
    paused.spec.paused = true;
    for job in [&a, &b, &far, &paused] {
        store.insert_job(job).await.unwrap();
    }
    let horizon = now + Duration::seconds(10);
    let due = store
        .due_jobs(DueCursor::START, horizon, 10, None)
        .await
        .unwrap();
    let expected = sorted(vec![
        (a.id, now + Duration::seconds(1)),
        (b.id, now + Duration::seconds(2)),
    ]);
    assert_eq!(sorted(due.jobs), expected);
    assert_eq!(due.next, None, "a short page is the last");
    assert_eq!(all_due(store, horizon, 1).await, expected);
}

/// Fires move a job's next fire time; the look-ahead query follows it exactly, whatever
/// order the store's index keeps (PostgreSQL's `due_bound` lags behind fires), and pages
/// through it without losing or repeating a job.
pub(super) async fn due_jobs_follow_fires(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    // First fires: `a` at +1 s, `b` at +5 s. After one fire each, `b` is next at +15 s
    // and `a` at +51 s: the order of their next fires is the reverse of the first ones.
    let a = Job::new(
        spec("a", json!({"every": "50s"})),
        now - Duration::seconds(49),
    );
    let b = Job::new(
        spec("b", json!({"every": "10s"})),
        now - Duration::seconds(5),
    );
    for job in [&a, &b] {
        store.insert_job(job).await.unwrap();
    }
    for job in [&a, &b] {
        let at = job.next_fire_at.unwrap();
        let batch = store.fire(&[job.id], at, GRACE, &firing()).await.unwrap();
        assert_eq!(batch.recorded.len(), 1, "{} fired", job.spec.name);
    }
    let a_next = (a.id, now + Duration::seconds(51));
    let b_next = (b.id, now + Duration::seconds(15));
    for limit in [1, 2, 10] {
        assert_eq!(
            all_due(store, now + Duration::seconds(60), limit).await,
            sorted(vec![a_next, b_next]),
            "pages of {limit}"
        );
    }
    // `a`'s first fire time is inside this window but its next fire is not.
    assert_eq!(
        all_due(store, now + Duration::seconds(35), 1).await,
        vec![b_next]
    );
    assert!(
        all_due(store, now + Duration::seconds(10), 1)
            .await
            .is_empty()
    );
}

pub(super) async fn queries_filter_by_shard(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let job = every_second("sharded", now);
    store.insert_job(&job).await.unwrap();
    let shard = shard_of(job.id, DEFAULT_SHARD_COUNT);
    let other = (shard + 1) % DEFAULT_SHARD_COUNT;
    let horizon = now + Duration::seconds(10);
    let mine = store
        .due_jobs(DueCursor::START, horizon, 10, Some(&[shard]))
        .await
        .unwrap();
    assert_eq!(mine.jobs.len(), 1);
    let theirs = store
        .due_jobs(DueCursor::START, horizon, 10, Some(&[other]))
        .await
        .unwrap();
    assert!(theirs.jobs.is_empty());
    assert!(
        store
            .due_jobs(DueCursor::START, horizon, 10, Some(&[]))
            .await
            .unwrap()
            .jobs
            .is_empty()
    );

    store
        .fire(&[job.id], now + Duration::seconds(1), GRACE, &firing())
        .await
        .unwrap();
    let later = now + Duration::seconds(60);
    assert_eq!(
        store
            .overdue_runs(later, later, None, 10, Some(&[shard]))
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        store
            .overdue_runs(later, later, None, 10, Some(&[other]))
            .await
            .unwrap()
            .is_empty()
    );
}
