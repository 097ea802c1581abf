//! The job list: every filter and every order (both ways), paged three jobs at a time
//! through cursors, against the same filter and order applied in memory
//! ([`JobFilter::matches`], [`JobFilter::key_order`]): pages join up without a gap or a
//! job twice, ties on last-change times included. There is no next-fire order, but each
//! job's next fire (none for a finished one) is in the answer. A cursor of one order is
//! refused by another.

use super::*;

/// Every order the list takes.
fn sorts() -> Vec<JobSort> {
    let mut sorts = vec![JobSort::Created];
    for descending in [false, true] {
        sorts.extend([
            JobSort::Name { descending },
            JobSort::Updated { descending },
        ]);
    }
    sorts
}

/// 24 jobs: apps `shop`, `mail`, `ops` (one job, a capitalised name); groups `orders` and
/// `mailers`; every mode; every fourth paused; next fires on four instants (ties) and
/// every fifth job finished; last changes on three instants.
fn fixture(now: DateTime<Utc>) -> Vec<Job> {
    (0..24)
        .map(|i| {
            let mode = [
                DeliveryMode::Group,
                DeliveryMode::Broadcast,
                DeliveryMode::Zone,
                DeliveryMode::Sharded,
            ][i % 4];
            let target = Target {
                mode,
                shards: (mode == DeliveryMode::Sharded).then_some(2),
                ..Target::group(if i % 3 == 0 { "mailers" } else { "orders" })
            };
            let mut job = with_target(&format!("job{:02}", (i * 7) % 24), now, target);
            job.spec.app = ["shop", "mail"][i % 2].into();
            if i == 23 {
                job.spec.app = "ops".into();
                job.spec.name = "Nightly-Report".into();
            }
            job.spec.paused = i % 4 == 1;
            job.next_fire_at = (i % 5 != 4).then(|| now + Duration::seconds((i % 4) as i64));
            job.updated_at = now + Duration::seconds((i % 3) as i64);
            job
        })
        .collect()
}

/// Every page of `filter` (from its start) read `limit` at a time, each page from the
/// cursor after the one before, checking each cursor round trips.
async fn every_page(store: &dyn Store, filter: &JobFilter) -> Vec<Uuid> {
    let mut filter = filter.clone();
    let mut all = Vec::new();
    for _ in 0..100 {
        let page = store.search_jobs(&filter).await.unwrap();
        assert!(page.len() <= filter.limit as usize);
        all.extend(page.iter().map(|j| j.id));
        if page.len() < filter.limit as usize {
            return all;
        }
        let last = page.last().unwrap();
        let cursor = filter.sort.position_of(last).cursor(filter.sort);
        filter.after = Some(JobPosition::parse_cursor(&cursor, filter.sort).unwrap());
    }
    panic!("the pages never end");
}

pub(super) async fn jobs_are_filtered_sorted_and_paged(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let jobs = fixture(now);
    for job in &jobs {
        store.insert_job(job).await.unwrap();
    }
    let filters: Vec<(&str, JobFilter)> = vec![
        ("none", JobFilter::default()),
        (
            "app",
            JobFilter {
                apps: Some(vec!["shop".into()]),
                ..JobFilter::default()
            },
        ),
        (
            "apps (a scoped token)",
            JobFilter {
                apps: Some(vec!["mail".into(), "ops".into()]),
                ..JobFilter::default()
            },
        ),
        (
            "group",
            JobFilter {
                group: Some("mailers".into()),
                ..JobFilter::default()
            },
        ),
        (
            "mode",
            JobFilter {
                mode: Some(DeliveryMode::Sharded),
                ..JobFilter::default()
            },
        ),
        (
            "paused",
            JobFilter {
                paused: Some(true),
                ..JobFilter::default()
            },
        ),
        (
            "running",
            JobFilter {
                paused: Some(false),
                ..JobFilter::default()
            },
        ),
        (
            "q in a name",
            JobFilter {
                search: Some("b0".into()),
                ..JobFilter::default()
            },
        ),
        (
            "q over app/name, any case",
            JobFilter {
                search: Some("ops/nightly".into()),
                ..JobFilter::default()
            },
        ),
        (
            "q with LIKE wildcards",
            JobFilter {
                search: Some("%_".into()),
                ..JobFilter::default()
            },
        ),
        (
            "all together",
            JobFilter {
                apps: Some(vec!["shop".into()]),
                group: Some("orders".into()),
                mode: Some(DeliveryMode::Zone),
                paused: Some(false),
                search: Some("job".into()),
                ..JobFilter::default()
            },
        ),
    ];
    for sort in sorts() {
        for (name, filter) in &filters {
            let filter = JobFilter {
                sort,
                limit: 3,
                ..filter.clone()
            };
            let mut wanted: Vec<&Job> = jobs.iter().filter(|j| filter.matches(j)).collect();
            wanted.sort_by(|a, b| filter.key_order(a, b));
            let wanted: Vec<Uuid> = wanted.iter().map(|j| j.id).collect();
            let got = every_page(store, &filter).await;
            assert_eq!(got, wanted, "{name}, sorted {:?}", sort.as_str());
            if *name == "none" {
                assert_eq!(got.len(), jobs.len(), "every job once");
            }
        }
    }
    // The fixture's cases select something (so the comparisons above say something).
    let some = |f: JobFilter| jobs.iter().filter(|j| f.matches(j)).count();
    assert_eq!(
        some(JobFilter {
            search: Some("ops/nightly".into()),
            ..JobFilter::default()
        }),
        1
    );
    assert_eq!(
        some(JobFilter {
            search: Some("%_".into()),
            ..JobFilter::default()
        }),
        0
    );
    assert_eq!(
        some(JobFilter {
            paused: Some(true),
            ..JobFilter::default()
        }),
        6
    );
    // The most recently changed first; each job's next fire as stored, finished jobs'
    // none.
    for descending in [false, true] {
        let page = store
            .search_jobs(&JobFilter {
                sort: JobSort::Updated { descending },
                limit: 100,
                ..JobFilter::default()
            })
            .await
            .unwrap();
        let expected = now + Duration::seconds(if descending { 2 } else { 0 });
        assert_eq!(page[0].updated_at, expected);
        assert_eq!(page.len(), jobs.len());
        for got in &page {
            let stored = jobs.iter().find(|j| j.id == got.id).unwrap();
            assert_eq!(got.next_fire_at, stored.next_fire_at, "{}", got.spec.name);
        }
        assert_eq!(page.iter().filter(|j| j.next_fire_at.is_none()).count(), 4);
    }
    // An empty app list (a scoped token asking for none of its apps) matches nothing.
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

pub(super) async fn a_cursor_serves_only_its_own_order(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    for job in fixture(now) {
        store.insert_job(&job).await.unwrap();
    }
    for sort in sorts() {
        let page = store
            .search_jobs(&JobFilter {
                sort,
                limit: 2,
                ..JobFilter::default()
            })
            .await
            .unwrap();
        let cursor = sort.position_of(&page[1]).cursor(sort);
        let position = JobPosition::parse_cursor(&cursor, sort).unwrap();
        let next = store
            .search_jobs(&JobFilter {
                sort,
                limit: 1,
                after: Some(position),
                ..JobFilter::default()
            })
            .await
            .unwrap();
        assert_ne!(next[0].id, page[0].id);
        assert_ne!(next[0].id, page[1].id);
        for other in sorts().into_iter().filter(|o| *o != sort) {
            let refused = JobPosition::parse_cursor(&cursor, other).unwrap_err();
            assert_eq!(
                refused.field,
                "cursor",
                "{cursor} with {:?}",
                other.as_str()
            );
        }
    }
}
