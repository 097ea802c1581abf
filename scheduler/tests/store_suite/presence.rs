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

/// Consumer `instance` of `group`, reporting `version`, heard from `at`.
fn seen(instance: &str, group: &str, version: Option<&str>, at: DateTime<Utc>) -> PresenceMessage {
    PresenceMessage {
        v: PROTOCOL_VERSION,
        instance: instance.into(),
        group: group.into(),
        zone: Some("dc1".into()),
        broadcast: true,
        version: version.map(str::to_string),
        at,
    }
}

fn ack_by(task_id: Uuid, consumer: &str, at: DateTime<Utc>) -> Reply {
    Reply::Ack(AckMessage {
        v: PROTOCOL_VERSION,
        task_id,
        attempt: 1,
        consumer: consumer.into(),
        acked_at: at,
    })
}

/// Instance, group, version, first seen, last seen, running.
type ListedRow<'a> = (
    &'a str,
    &'a str,
    Option<&'a str>,
    DateTime<Utc>,
    DateTime<Utc>,
    u64,
);

pub(super) async fn consumers_list_instances_with_their_running_runs(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let epoch = DateTime::UNIX_EPOCH;
    assert!(store.consumers(epoch, None).await.unwrap().is_empty());

    // An instance keeps its first presence and takes its latest group, zone and version.
    store
        .record_presence(&seen(
            "a",
            "orders",
            Some("x/1"),
            now - Duration::minutes(10),
        ))
        .await
        .unwrap();
    store
        .record_presence(&seen("a", "orders", Some("x/2"), now))
        .await
        .unwrap();
    // A late, older presence moves neither time back.
    store
        .record_presence(&seen(
            "a",
            "orders",
            Some("x/2"),
            now - Duration::minutes(20),
        ))
        .await
        .unwrap();
    store
        .record_presence(&seen("b", "orders", None, now - Duration::seconds(5)))
        .await
        .unwrap();
    store
        .record_presence(&seen("old", "web", None, now - Duration::days(2)))
        .await
        .unwrap();

    // Runs: two of a group job in `orders` (one acked by a, one still queued) and a
    // broadcast run in `web` acked by a and b, b finished.
    let (first, second) = two_runs_of(store, "close", now).await;
    store
        .mark_dispatched(&[first, second], now + Duration::seconds(2))
        .await
        .unwrap();
    let job = with_target(
        "refresh",
        now,
        Target {
            mode: DeliveryMode::Broadcast,
            ..Target::group("web")
        },
    );
    store.insert_job(&job).await.unwrap();
    let fired = store
        .fire(&[job.id], now + Duration::seconds(1), GRACE, &firing())
        .await
        .unwrap();
    let broadcast = fired.recorded[0].task_id;
    store
        .mark_dispatched(&[broadcast], now + Duration::seconds(2))
        .await
        .unwrap();
    let at = now + Duration::seconds(3);
    let done = Reply::Result(ResultMessage {
        v: PROTOCOL_VERSION,
        task_id: broadcast,
        attempt: 1,
        consumer: "b".into(),
        finished_at: at,
        replayed: false,
        outcome: TaskOutcome::Succeeded { output: None },
    });
    let replies = [
        ack_by(first, "a", at),
        ack_by(broadcast, "a", at),
        ack_by(broadcast, "b", at),
        done,
    ];
    store
        .record_replies(&replies.iter().collect::<Vec<_>>(), at, &rand::random)
        .await
        .unwrap();

    let listed = store
        .consumers(now - Duration::minutes(1), None)
        .await
        .unwrap();
    let rows: Vec<ListedRow<'_>> = listed
        .iter()
        .map(|c| {
            (
                c.instance.as_str(),
                c.group.as_str(),
                c.version.as_deref(),
                c.first_seen,
                c.last_seen,
                c.running,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (
                "a",
                "orders",
                Some("x/2"),
                now - Duration::minutes(20),
                now,
                2
            ),
            (
                "b",
                "orders",
                None,
                now - Duration::seconds(5),
                now - Duration::seconds(5),
                0
            ),
        ],
        "a runs one group run and one broadcast; b finished its broadcast"
    );
    assert_eq!(listed[0].zone.as_deref(), Some("dc1"));
    assert!(listed[0].broadcast);

    let all = store.consumers(epoch, None).await.unwrap();
    let ids: Vec<&str> = all.iter().map(|c| c.instance.as_str()).collect();
    assert_eq!(ids, ["a", "b", "old"], "by group, then instance");
    let web = store.consumers(epoch, Some("web")).await.unwrap();
    assert_eq!(web.len(), 1);
    assert_eq!(web[0].instance, "old");
    assert!(
        store
            .consumers(epoch, Some("nope"))
            .await
            .unwrap()
            .is_empty()
    );

    // Queued: the orders run nobody acked; the broadcast run is acked (taken) already.
    assert_eq!(
        store.queued_by_group().await.unwrap(),
        [("orders".to_string(), 1)]
    );

    // Retention deletes the instance not heard from for longer than its cutoff only.
    assert_eq!(
        store
            .prune_consumers(now - Duration::days(1), 10)
            .await
            .unwrap(),
        1
    );
    let ids: Vec<String> = store
        .consumers(epoch, None)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.instance)
        .collect();
    assert_eq!(ids, ["a", "b"]);
}

pub(super) async fn the_pruner_keeps_consumers_for_consumer_retention(store: Arc<dyn Store>) {
    let now = t("2026-11-21T10:00:00Z");
    for (instance, age) in [("recent", 30), ("gone", 90)] {
        store
            .record_presence(&seen(
                instance,
                "orders",
                None,
                now - Duration::minutes(age),
            ))
            .await
            .unwrap();
    }
    let pruner = Pruner::new(
        store.clone(),
        RetentionSettings {
            consumer_retention: std::time::Duration::from_secs(3600),
            ..RetentionSettings::new(None)
        },
    );
    let outcome = pruner.run_once(now).await.unwrap();
    assert_eq!(outcome.consumers, 1);
    let left: Vec<String> = store
        .consumers(DateTime::UNIX_EPOCH, None)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.instance)
        .collect();
    assert_eq!(left, ["recent"]);
}
