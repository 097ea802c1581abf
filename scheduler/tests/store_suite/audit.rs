//! The audit trail: appended in batches, read newest first with filters and a cursor,
//! pruned by age.

use chime_scheduler::domain::audit::{AuditEntry, AuditQuery};

use super::*;

fn entry(at: &str, actor: &str, action: &str, app: Option<&str>) -> AuditEntry {
    AuditEntry {
        id: Uuid::now_v7(),
        at: t(at),
        actor: actor.into(),
        action: action.into(),
        target: format!("job:{}", Uuid::now_v7()),
        app: app.map(str::to_string),
        change: json!({"note": "héllo", "n": [1, 2]}),
    }
}

pub(super) async fn audit_entries_filter_page_and_prune(store: &dyn Store) {
    let entries = vec![
        entry("2026-11-27T10:00:00Z", "ci", "job.create", Some("shop")),
        entry("2026-11-27T10:00:01Z", "ci", "job.update", Some("shop")),
        entry("2026-11-27T10:00:02Z", "ops", "job.create", Some("web")),
        entry("2026-11-27T10:00:03Z", "admin", "token.create", None),
    ];
    store.insert_audit(&entries).await.unwrap();
    let all = store
        .list_audit(&AuditQuery {
            limit: 10,
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    let ids = |list: &[AuditEntry]| list.iter().map(|e| e.id).collect::<Vec<_>>();
    assert_eq!(
        ids(&all),
        [entries[3].id, entries[2].id, entries[1].id, entries[0].id]
    );
    assert_eq!(all[3], entries[0], "round trip");
    let shop = store
        .list_audit(&AuditQuery {
            apps: Some(vec!["shop".into()]),
            limit: 10,
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(&shop), [entries[1].id, entries[0].id]);
    let filtered = store
        .list_audit(&AuditQuery {
            actor: Some("ci".into()),
            action: Some("job.create".into()),
            limit: 10,
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(&filtered), [entries[0].id]);
    let page = store
        .list_audit(&AuditQuery {
            before: Some((entries[2].at, entries[2].id)),
            since: Some(t("2026-11-27T10:00:01Z")),
            limit: 10,
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(&page), [entries[1].id]);
    let pruned = store
        .prune_audit(t("2026-11-27T10:00:02Z"), 100)
        .await
        .unwrap();
    assert_eq!(pruned, 2);
    let left = store
        .list_audit(&AuditQuery {
            limit: 10,
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(&left), [entries[3].id, entries[2].id]);
}
