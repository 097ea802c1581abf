//! Runs searched across jobs: every filter, alone and combined, against the same filter
//! applied in memory ([`RunFilter::matches`]), and pages that join up.

use super::*;
use chime_scheduler::domain::RunFilter;

/// Every run of `jobs` (id, app, group fired to) as stored, newest first.
async fn every_run(store: &dyn Store, jobs: &[(Uuid, &str, &str)]) -> Vec<(Run, String, String)> {
    let mut all = Vec::new();
    for (job, app, group) in jobs {
        let runs = store
            .list_runs(
                *job,
                &RunPage {
                    before: None,
                    limit: 1000,
                },
            )
            .await
            .unwrap();
        for run in runs {
            all.push((run, app.to_string(), group.to_string()));
        }
    }
    all.sort_by_key(|(run, _, _)| std::cmp::Reverse((run.fire_time, run.id)));
    all
}

fn expected(all: &[(Run, String, String)], filter: &RunFilter) -> Vec<Uuid> {
    all.iter()
        .filter(|(run, app, group)| filter.matches(run, app, group))
        .take(filter.limit as usize)
        .map(|(run, _, _)| run.id)
        .collect()
}

async fn found(store: &dyn Store, filter: &RunFilter) -> Vec<Uuid> {
    store
        .search_runs(filter)
        .await
        .unwrap()
        .iter()
        .map(|run| run.id)
        .collect()
}

pub(super) async fn runs_are_searched_across_jobs(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let shop = every_second("a", now);
    let mut mail = with_target("b", now, Target::group("mailers"));
    mail.spec.app = "mail".into();
    let bcast = with_target(
        "c",
        now,
        Target {
            mode: DeliveryMode::Broadcast,
            ..Target::group("orders")
        },
    );
    for job in [&shop, &mail, &bcast] {
        store.insert_job(job).await.unwrap();
    }
    // Twelve manual runs, two per fire time (so ties are broken by id), in three states.
    let jobs = [&shop, &mail, &bcast];
    for i in 0..12_i64 {
        let job = jobs[i as usize % 3];
        let at = now - Duration::seconds(10 + i / 2);
        let mut run = Run::new(job.id, at, RunTrigger::Manual, json!({"i": i}), now);
        run.mode = job.spec.settings.target.mode;
        assert!(store.insert_run(&run).await.unwrap());
        let finished = match i % 4 {
            0 => Some(RunState::Dead),
            1 => Some(RunState::Succeeded),
            _ => None,
        };
        if let Some(state) = finished {
            let changed = store
                .update_run(run.id, &move |run: &mut Run, _: &JobSettings| {
                    run.state = state;
                    run.finished_at = Some(now + Duration::seconds(i));
                    run.due_at = None;
                    true
                })
                .await
                .unwrap();
            assert!(changed.is_some_and(|(changed, _)| changed));
        }
    }
    // Runs recorded by a fire carry their job's app and group too.
    let fired = store
        .fire(&[shop.id], now + Duration::seconds(2), GRACE, &firing())
        .await
        .unwrap();
    assert!(!fired.recorded.is_empty());
    // A job's later change of group keeps its runs where they were fired.
    let stored = store.get_job(mail.id).await.unwrap().unwrap();
    let mut new_spec = stored.spec.clone();
    new_spec.settings.target = Target::group("mailers-v2");
    let moved = stored.updated(new_spec, now + Duration::seconds(3));
    store
        .update_job(&moved, stored.version, false)
        .await
        .unwrap();

    // A job moved to another app takes its runs along: a run is its job's app's.
    let stored = store.get_job(bcast.id).await.unwrap().unwrap();
    let mut new_spec = stored.spec.clone();
    new_spec.app = "ops".into();
    let moved = stored.updated(new_spec, now + Duration::seconds(3));
    store
        .update_job(&moved, stored.version, false)
        .await
        .unwrap();

    let all = every_run(
        store,
        &[
            (shop.id, "shop", "orders"),
            (mail.id, "mail", "mailers"),
            (bcast.id, "ops", "orders"),
        ],
    )
    .await;
    assert_eq!(all.len(), 12 + fired.recorded.len());
    let page = |filter: RunFilter| RunFilter {
        limit: 1000,
        ..filter
    };
    let filters = [
        page(RunFilter::default()),
        page(RunFilter {
            states: vec![RunState::Dead],
            ..RunFilter::default()
        }),
        page(RunFilter {
            states: vec![RunState::Dead, RunState::Succeeded],
            ..RunFilter::default()
        }),
        page(RunFilter {
            apps: Some(vec!["mail".into()]),
            ..RunFilter::default()
        }),
        page(RunFilter {
            apps: Some(vec!["shop".into(), "mail".into()]),
            ..RunFilter::default()
        }),
        page(RunFilter {
            apps: Some(vec!["nobody".into()]),
            ..RunFilter::default()
        }),
        page(RunFilter {
            job: Some(shop.id),
            ..RunFilter::default()
        }),
        page(RunFilter {
            group: Some("mailers".into()),
            ..RunFilter::default()
        }),
        page(RunFilter {
            mode: Some(DeliveryMode::Broadcast),
            ..RunFilter::default()
        }),
        page(RunFilter {
            fired_after: Some(now - Duration::seconds(13)),
            fired_before: Some(now - Duration::seconds(11)),
            ..RunFilter::default()
        }),
        page(RunFilter {
            finished_after: Some(now + Duration::seconds(4)),
            finished_before: Some(now + Duration::seconds(9)),
            ..RunFilter::default()
        }),
        page(RunFilter {
            apps: Some(vec!["shop".into()]),
            states: vec![RunState::Dead],
            fired_before: Some(now),
            ..RunFilter::default()
        }),
        RunFilter {
            limit: 3,
            ..RunFilter::default()
        },
    ];
    for filter in &filters {
        let want = expected(&all, filter);
        assert_eq!(found(store, filter).await, want, "{filter:?}");
    }
    // The filters above each select something, and not everything.
    assert_eq!(found(store, &filters[1]).await.len(), 3, "three dead runs");
    assert_eq!(
        found(store, &filters[3]).await.len(),
        4,
        "four runs of app mail"
    );
    assert_eq!(
        found(store, &filters[7]).await.len(),
        4,
        "mail's runs stay in the group they were fired to"
    );
    assert!(found(store, &filters[5]).await.is_empty());
    let ops = page(RunFilter {
        apps: Some(vec!["ops".into()]),
        ..RunFilter::default()
    });
    assert_eq!(found(store, &ops).await, expected(&all, &ops));
    assert_eq!(found(store, &ops).await.len(), 4, "the moved job's runs");
    assert!(
        found(
            store,
            &page(RunFilter {
                apps: Some(vec![]),
                ..RunFilter::default()
            })
        )
        .await
        .is_empty()
    );

    // Pages of two join up to the whole list, newest first, each run once.
    let mut paged = Vec::new();
    let mut filter = RunFilter {
        limit: 2,
        ..RunFilter::default()
    };
    loop {
        let runs = store.search_runs(&filter).await.unwrap();
        paged.extend(runs.iter().map(|run| run.id));
        match runs.last() {
            Some(last) if runs.len() == 2 => filter.before = Some((last.fire_time, last.id)),
            _ => break,
        }
    }
    assert_eq!(
        paged,
        all.iter().map(|(run, _, _)| run.id).collect::<Vec<_>>()
    );
}
