//! [`Consumers`]: the consumer instances `chimed` has heard from and the groups they
//! serve, as operators see them (`GET /v1/consumers`, `chimectl consumer ls`).
//!
//! Each instance is listed as its latest presence message reported it (group, zone,
//! broadcast, software version), with when it was first and last seen, whether it is
//! live (a presence within the last 15 s, by this node's clock) and how many runs it is
//! running. Each group comes with its live instances, the runs waiting in its queue
//! (`dispatched`, not acked) and the runs under way; a group with queued work and no live
//! instance is *unattended*.
//!
//! Access: consumers serve groups, and a group serves every app whose jobs target it, so
//! no app owns one. A caller scoped to apps sees the groups its apps' jobs target (and
//! their instances); admins and callers on every app see every group.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use chrono::{DateTime, Utc};

use crate::{
    domain::access::{Action, Caller, Denied},
    store::{ConsumerInstance, Store, StoreError, live_since},
};

/// Why consumers could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum ConsumersError {
    /// The caller may not read consumers.
    #[error(transparent)]
    Denied(#[from] Denied),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumersQuery {
    /// Only this group.
    pub group: Option<String>,
    /// Also instances no longer live (kept for `consumer_retention` after their last
    /// presence); by default only live ones.
    pub include_stale: bool,
}

/// One instance as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceStatus {
    /// The instance as stored, with its running runs.
    pub instance: ConsumerInstance,
    /// Whether its latest presence is recent enough for it to count as live.
    pub live: bool,
}

/// One group as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupStatus {
    /// The group.
    pub group: String,
    /// Its live instances.
    pub live_consumers: u64,
    /// Its runs published and not acked yet: the tasks waiting in its queues.
    pub queued: u64,
    /// Runs its instances (live or not) are running.
    pub running: u64,
    /// Work is queued and no instance is live.
    pub unattended: bool,
}

/// The answer: instances by group and instance id, groups by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumersStatus {
    /// The instances.
    pub instances: Vec<InstanceStatus>,
    /// Every group a job targets, an instance serves or work is queued for.
    pub groups: Vec<GroupStatus>,
}

/// The consumers service. Cheap to share.
pub struct Consumers {
    store: Arc<dyn Store>,
}

impl Consumers {
    /// The service over `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// The instances and groups `caller` may see, narrowed by `query`, at `now`.
    pub async fn list(
        &self,
        caller: &Caller,
        query: &ConsumersQuery,
        now: DateTime<Utc>,
    ) -> Result<ConsumersStatus, ConsumersError> {
        caller.check(Action::ReadConsumers, None)?;
        let visible = match caller.visible_apps() {
            None => None,
            Some(apps) => {
                let mut groups = BTreeSet::new();
                for app in apps {
                    groups.extend(self.store.app_groups(&app).await?);
                }
                Some(groups)
            }
        };
        let live_from = live_since(now);
        // Every stored instance is younger than the epoch; stale ones are included then.
        let since = if query.include_stale {
            DateTime::UNIX_EPOCH
        } else {
            live_from
        };
        let instances = self.store.consumers(since, query.group.as_deref()).await?;
        let queued = self.store.queued_by_group().await?;
        let targeted = self.store.target_groups().await?;
        let shown = |group: &str| {
            query.group.as_deref().is_none_or(|g| g == group)
                && visible.as_ref().is_none_or(|v| v.contains(group))
        };
        Ok(summarise(
            instances.into_iter().filter(|i| shown(&i.group)).collect(),
            queued.into_iter().filter(|(g, _)| shown(g)).collect(),
            targeted.into_iter().filter(|g| shown(g)).collect(),
            live_from,
        ))
    }
}

/// The answer from the instances, the queued runs by group and the groups jobs target,
/// all already narrowed to what the caller sees; instances last seen at or after
/// `live_from` are live.
pub fn summarise(
    instances: Vec<ConsumerInstance>,
    queued: Vec<(String, u64)>,
    targeted: Vec<String>,
    live_from: DateTime<Utc>,
) -> ConsumersStatus {
    fn group<'a>(groups: &'a mut BTreeMap<String, GroupStatus>, name: &str) -> &'a mut GroupStatus {
        groups
            .entry(name.to_string())
            .or_insert_with(|| GroupStatus {
                group: name.to_string(),
                live_consumers: 0,
                queued: 0,
                running: 0,
                unattended: false,
            })
    }
    let mut groups = BTreeMap::new();
    for name in &targeted {
        group(&mut groups, name);
    }
    for (name, n) in &queued {
        group(&mut groups, name).queued += n;
    }
    let instances: Vec<InstanceStatus> = instances
        .into_iter()
        .map(|instance| {
            let live = instance.last_seen >= live_from;
            let status = group(&mut groups, &instance.group);
            status.live_consumers += u64::from(live);
            status.running += instance.running;
            InstanceStatus { instance, live }
        })
        .collect();
    let groups = groups
        .into_values()
        .map(|mut g| {
            g.unattended = g.queued > 0 && g.live_consumers == 0;
            g
        })
        .collect();
    ConsumersStatus { instances, groups }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn instance(id: &str, group: &str, last_seen: &str, running: u64) -> ConsumerInstance {
        ConsumerInstance {
            instance: id.into(),
            group: group.into(),
            zone: None,
            broadcast: false,
            version: None,
            first_seen: t("2026-11-21T09:00:00Z"),
            last_seen: t(last_seen),
            running,
        }
    }

    #[test]
    fn groups_count_live_instances_and_flag_queued_work_nobody_takes() {
        let live_from = t("2026-11-21T10:00:00Z");
        let status = summarise(
            vec![
                instance("a", "orders", "2026-11-21T10:00:05Z", 2),
                instance("b", "orders", "2026-11-21T10:00:00Z", 0),
                instance("gone", "billing", "2026-11-21T09:59:59Z", 1),
            ],
            vec![("billing".into(), 3), ("orders".into(), 4)],
            vec!["mail".into(), "orders".into()],
            live_from,
        );
        let live: Vec<(&str, bool)> = status
            .instances
            .iter()
            .map(|i| (i.instance.instance.as_str(), i.live))
            .collect();
        assert_eq!(live, [("a", true), ("b", true), ("gone", false)]);
        let groups: Vec<(&str, u64, u64, u64, bool)> = status
            .groups
            .iter()
            .map(|g| {
                let GroupStatus {
                    group,
                    live_consumers,
                    queued,
                    running,
                    unattended,
                } = g;
                (
                    group.as_str(),
                    *live_consumers,
                    *queued,
                    *running,
                    *unattended,
                )
            })
            .collect();
        assert_eq!(
            groups,
            [
                ("billing", 0, 3, 1, true),
                ("mail", 0, 0, 0, false),
                ("orders", 2, 4, 2, false),
            ]
        );
    }
}
