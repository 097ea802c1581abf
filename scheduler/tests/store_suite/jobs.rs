//! Jobs: create, read, page, update with its version check, delete, target groups.

use super::*;

pub(super) async fn jobs_round_trip_and_names_are_unique(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let job = Job::new(
        spec(
            "close",
            json!({"cron": "0 */2 * * * *", "timezone": "Asia/Shanghai"}),
        ),
        now,
    );
    store.insert_job(&job).await.unwrap();
    assert_eq!(store.get_job(job.id).await.unwrap(), Some(job.clone()));
    let dup = Job::new(spec("close", json!({"every": "5s"})), now);
    assert!(matches!(
        store.insert_job(&dup).await,
        Err(StoreError::DuplicateName { ref app, ref name }) if app == "shop" && name == "close"
    ));
    let mut other_app = dup.clone();
    other_app.spec.app = "billing".into();
    store.insert_job(&other_app).await.unwrap();
    assert_eq!(store.get_job(Uuid::now_v7()).await.unwrap(), None);
}

pub(super) async fn job_list_pages_in_creation_order(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let mut ids = Vec::new();
    for i in 0..5 {
        let mut job = every_second(&format!("j{i}"), now);
        if i == 4 {
            job.spec.app = "other".into();
        }
        store.insert_job(&job).await.unwrap();
        ids.push(job.id);
    }
    let first = store
        .search_jobs(&JobFilter {
            limit: 2,
            ..JobFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(first.iter().map(|j| j.id).collect::<Vec<_>>(), ids[..2]);
    let rest = store
        .search_jobs(&JobFilter {
            after: Some(JobPosition::Id(ids[1])),
            limit: 10,
            ..JobFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(rest.iter().map(|j| j.id).collect::<Vec<_>>(), ids[2..]);
    let shop = store
        .search_jobs(&JobFilter {
            apps: Some(vec!["shop".into()]),
            limit: 10,
            ..JobFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(shop.len(), 4);
    // A scoped caller's listing: only the apps named, in creation order.
    let scoped = store
        .search_jobs(&JobFilter {
            apps: Some(vec!["other".into(), "nobody".into()]),
            limit: 10,
            ..JobFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(scoped.iter().map(|j| j.id).collect::<Vec<_>>(), [ids[4]]);
    let none = store
        .search_jobs(&JobFilter {
            apps: Some(vec![]),
            limit: 10,
            ..JobFilter::default()
        })
        .await
        .unwrap();
    assert!(none.is_empty());
}

pub(super) async fn updates_check_the_version(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let job = every_second("a", now);
    store.insert_job(&job).await.unwrap();
    store.insert_job(&every_second("b", now)).await.unwrap();

    let mut new_spec = job.spec.clone();
    new_spec.settings.payload = json!({"v": 2});
    let updated = job.updated(new_spec, now + Duration::seconds(1));
    let stored = store.update_job(&updated, 1, false).await.unwrap();
    assert_eq!(stored.version, 2);
    assert_eq!(stored.spec.settings.payload, json!({"v": 2}));

    assert!(matches!(
        store.update_job(&updated, 1, false).await,
        Err(StoreError::VersionConflict {
            expected: 1,
            current: 2,
            ..
        })
    ));
    let mut renamed = stored.clone();
    renamed.spec.name = "b".into();
    renamed.version = 3;
    assert!(matches!(
        store.update_job(&renamed, 2, false).await,
        Err(StoreError::DuplicateName { .. })
    ));
    let mut ghost = stored.clone();
    ghost.id = Uuid::now_v7();
    assert!(matches!(
        store.update_job(&ghost, 1, false).await,
        Err(StoreError::JobNotFound(_))
    ));
    assert_eq!(store.get_job(job.id).await.unwrap().unwrap().version, 2);
}

pub(super) async fn update_keeps_next_fire_a_fire_advanced(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let job = every_second("a", now);
    store.insert_job(&job).await.unwrap();
    let fired_at = now + Duration::milliseconds(1001);
    store
        .fire(&[job.id], fired_at, GRACE, &firing())
        .await
        .unwrap();
    // An API update computed from the job as read before the fire.
    let mut new_spec = job.spec.clone();
    new_spec.settings.payload = json!(null);
    let stored = store
        .update_job(&job.updated(new_spec, fired_at), 1, false)
        .await
        .unwrap();
    assert_eq!(stored.next_fire_at, Some(now + Duration::seconds(2)));
    let mut rescheduled = stored.spec.clone();
    rescheduled.settings.schedule = Schedule::Every(Duration::seconds(60));
    let moved = store
        .update_job(&stored.updated(rescheduled, fired_at), 2, true)
        .await
        .unwrap();
    assert_eq!(moved.next_fire_at, Some(t("2026-11-21T10:01:01.001Z")));
}

pub(super) async fn delete_removes_job_and_runs(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let job = every_second("a", now);
    store.insert_job(&job).await.unwrap();
    let batch = store
        .fire(&[job.id], now + Duration::seconds(1), GRACE, &firing())
        .await
        .unwrap();
    let run_id = batch.recorded[0].task_id;
    assert!(store.delete_job(job.id).await.unwrap());
    assert!(!store.delete_job(job.id).await.unwrap());
    assert_eq!(store.get_run(run_id).await.unwrap(), None);
}

/// The groups jobs target, each once and in order, for the dead-letter sampler; gone with
/// the last job that targets it.
pub(super) async fn target_groups_lists_each_group_once(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    assert!(store.target_groups().await.unwrap().is_empty());
    let mut jobs = Vec::new();
    for (name, group) in [
        ("a", "orders"),
        ("b", "billing"),
        ("c", "orders"),
        ("d", "audit"),
    ] {
        let job = with_target(name, now, Target::group(group));
        store.insert_job(&job).await.unwrap();
        jobs.push(job);
    }
    assert_eq!(
        store.target_groups().await.unwrap(),
        ["audit", "billing", "orders"]
    );
    assert!(store.delete_job(jobs[3].id).await.unwrap());
    assert_eq!(store.target_groups().await.unwrap(), ["billing", "orders"]);
}

pub(super) async fn app_usage_counts_jobs_and_groups(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    for (name, app, group) in [
        ("a", "shop", "orders"),
        ("b", "shop", "mail"),
        ("c", "shop", "orders"),
        ("d", "web", "pages"),
    ] {
        let mut job = every_second(name, now);
        job.spec.app = app.into();
        job.spec.settings.target = Target::group(group);
        store.insert_job(&job).await.unwrap();
    }
    assert_eq!(store.count_app_jobs("shop").await.unwrap(), 3);
    assert_eq!(store.count_app_jobs("nobody").await.unwrap(), 0);
    assert!(store.app_uses_group("shop", "mail").await.unwrap());
    assert!(!store.app_uses_group("shop", "pages").await.unwrap());
    let mut groups = store.app_groups("shop").await.unwrap();
    groups.sort();
    assert_eq!(groups, ["mail", "orders"]);
}
