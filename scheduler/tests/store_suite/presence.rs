//! Observers' registrations and the observer list.

use super::*;

fn observe(observer: &str, patterns: &[&str], at: DateTime<Utc>) -> ObserveMessage {
    ObserveMessage {
        v: 1,
        observer: observer.into(),
        patterns: patterns.iter().map(|p| p.to_string()).collect(),
        at,
    }
}

pub(super) async fn observer_registrations_are_kept_until_they_expire(store: Arc<dyn Store>) {
    let now = Utc::now();
    let week = Duration::milliseconds(OBSERVER_TTL_MS as i64);
    let since = now - week;
    assert!(store.observed_patterns(since).await.unwrap().is_empty());

    store
        .record_observer(&observe(
            "audit",
            &["shop.*", "billing.#"],
            now - week - Duration::hours(1),
        ))
        .await
        .unwrap();
    assert!(
        store.observed_patterns(since).await.unwrap().is_empty(),
        "registered before the window"
    );
    // Registering again renews; a pattern two observers share is listed once, and a
    // pattern repeated in one message is one registration.
    store
        .record_observer(&observe("audit", &["shop.*", "shop.*"], now))
        .await
        .unwrap();
    store
        .record_observer(&observe(
            "dashboards",
            &["shop.*", "#"],
            now - Duration::hours(1),
        ))
        .await
        .unwrap();
    let mut patterns = store.observed_patterns(since).await.unwrap();
    patterns.sort();
    assert_eq!(patterns, ["#", "shop.*"]);
    // An older announcement arriving late does not roll the registration back.
    store
        .record_observer(&observe(
            "audit",
            &["shop.*"],
            now - week - Duration::days(1),
        ))
        .await
        .unwrap();
    let recent = store
        .observed_patterns(now - Duration::minutes(1))
        .await
        .unwrap();
    assert_eq!(recent, ["shop.*"]);

    // Retention forgets what was not registered again: audit's "billing.#".
    assert_eq!(store.prune_observers(since, 10).await.unwrap(), 1);
    assert_eq!(store.prune_observers(since, 10).await.unwrap(), 0);
    let mut patterns = store.observed_patterns(now - week * 2).await.unwrap();
    patterns.sort();
    assert_eq!(patterns, ["#", "shop.*"]);
    let pruner = Pruner::new(store.clone(), RetentionSettings::new(None));
    let outcome = pruner
        .run_once(now + week + Duration::days(1))
        .await
        .unwrap();
    assert_eq!(
        outcome.observers, 3,
        "every pattern expired a week after it was seen"
    );
    assert!(
        store
            .observed_patterns(now - week * 2)
            .await
            .unwrap()
            .is_empty()
    );
}

pub(super) async fn observer_names_list_every_observer_on_record_once(store: Arc<dyn Store>) {
    let now = Utc::now();
    assert!(store.observer_names().await.unwrap().is_empty());
    store
        .record_observer(&observe("dashboards", &["shop.*", "#"], now))
        .await
        .unwrap();
    store
        .record_observer(&observe("audit", &["billing.#"], now - Duration::days(30)))
        .await
        .unwrap();
    assert_eq!(
        store.observer_names().await.unwrap(),
        ["audit", "dashboards"],
        "each name once, however old its registration"
    );
    store
        .prune_observers(now - Duration::days(1), 10)
        .await
        .unwrap();
    assert_eq!(store.observer_names().await.unwrap(), ["dashboards"]);
}
