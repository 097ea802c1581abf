//! Tasks of fires armed ahead of their time, held until they are due (their fire time,
//! plus the fire's jitter). A task is never published before it is due; a newer copy of a held task (the fire armed
//! again after a change, or re-submitted by a takeover) replaces the older one.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::outgoing::Outgoing;

/// Held tasks in fire-time order.
#[derive(Debug, Default)]
pub(super) struct Held {
    by_time: BTreeMap<(DateTime<Utc>, Uuid), Outgoing>,
    fire_times: HashMap<Uuid, DateTime<Utc>>,
}

impl Held {
    /// Holds `outgoing` until its fire time, replacing a held copy of the same task.
    pub(super) fn hold(&mut self, mut outgoing: Outgoing) {
        let id = outgoing.task.task_id;
        if let Some(old_time) = self.fire_times.remove(&id)
            && let Some(old) = self.by_time.remove(&(old_time, id))
        {
            outgoing.recheck |= old.recheck;
        }
        let at = outgoing.due;
        self.fire_times.insert(id, at);
        self.by_time.insert((at, id), outgoing);
    }

    /// Whether the task `id` is held.
    pub(super) fn contains(&self, id: Uuid) -> bool {
        self.fire_times.contains_key(&id)
    }

    /// The earliest fire time held.
    pub(super) fn next_due(&self) -> Option<DateTime<Utc>> {
        self.by_time.keys().next().map(|(at, _)| *at)
    }

    /// Removes and returns, in fire-time order, the tasks due at `now`.
    pub(super) fn release(&mut self, now: DateTime<Utc>) -> Vec<Outgoing> {
        let mut due = Vec::new();
        while let Some(entry) = self.by_time.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let outgoing = entry.remove();
            self.fire_times.remove(&outgoing.task.task_id);
            due.push(outgoing);
        }
        due
    }

    /// Marks every held task `picked` to be checked against the store before it is
    /// published; returns how many.
    pub(super) fn recheck(&mut self, picked: impl Fn(&Outgoing) -> bool) -> usize {
        let mut marked = 0;
        for outgoing in self.by_time.values_mut().filter(|o| picked(o)) {
            outgoing.recheck = true;
            marked += 1;
        }
        marked
    }

    /// Number of tasks held.
    pub(super) fn len(&self) -> usize {
        self.fire_times.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chime_consumer::protocol::{PROTOCOL_VERSION, TaskMessage};
    use chrono::Duration;

    fn t0() -> DateTime<Utc> {
        "2026-11-21T10:00:00Z".parse().unwrap()
    }

    fn outgoing(id: u128, job: u128, fire_time: DateTime<Utc>) -> Outgoing {
        Outgoing {
            task: TaskMessage {
                v: PROTOCOL_VERSION,
                task_id: Uuid::from_u128(id),
                job_id: Uuid::from_u128(job),
                app: "a".into(),
                job: "j".into(),
                group: "g".into(),
                fire_time,
                shard: 0,
                shard_total: 1,
                attempt: 1,
                mode: Default::default(),
                zone: None,
                payload: serde_json::json!({"copy": id}),
                published_at: t0(),
                run_timeout_ms: None,
            },
            due: fire_time,
            first: true,
            since: std::time::Instant::now(),
            fenced: true,
            recheck: false,
        }
    }

    #[test]
    fn releases_in_fire_time_order_and_never_early() {
        let mut held = Held::default();
        held.hold(outgoing(1, 1, t0() + Duration::seconds(2)));
        held.hold(outgoing(2, 2, t0() + Duration::seconds(1)));
        held.hold(outgoing(3, 3, t0() + Duration::seconds(3)));
        assert_eq!(held.next_due(), Some(t0() + Duration::seconds(1)));
        assert!(held.release(t0()).is_empty());
        let due = held.release(t0() + Duration::seconds(2));
        let ids: Vec<u128> = due.iter().map(|o| o.task.task_id.as_u128()).collect();
        assert_eq!(ids, [2, 1]);
        assert_eq!(held.len(), 1);
        assert!(!held.contains(Uuid::from_u128(1)));
        assert!(held.contains(Uuid::from_u128(3)));
    }

    #[test]
    fn a_jittered_task_waits_for_its_due_time_not_its_fire_time() {
        let mut held = Held::default();
        let mut jittered = outgoing(1, 1, t0());
        jittered.due = t0() + Duration::seconds(20);
        held.hold(jittered);
        held.hold(outgoing(2, 2, t0() + Duration::seconds(5)));
        assert_eq!(held.next_due(), Some(t0() + Duration::seconds(5)));
        let first = held.release(t0() + Duration::seconds(19));
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].task.task_id.as_u128(), 2);
        let second = held.release(t0() + Duration::seconds(20));
        assert_eq!(
            second[0].task.fire_time,
            t0(),
            "the fire time stays nominal"
        );
    }

    #[test]
    fn a_newer_copy_replaces_the_held_one_and_keeps_its_recheck() {
        let mut held = Held::default();
        held.hold(outgoing(1, 7, t0()));
        held.hold(outgoing(2, 8, t0()));
        assert_eq!(held.recheck(|o| o.task.job_id == Uuid::from_u128(7)), 1);
        let mut newer = outgoing(1, 7, t0());
        newer.task.payload = serde_json::json!({"copy": "newer"});
        held.hold(newer);
        assert_eq!(held.len(), 2);
        let due = held.release(t0());
        let first = due.iter().find(|o| o.task.task_id.as_u128() == 1).unwrap();
        assert_eq!(first.task.payload, serde_json::json!({"copy": "newer"}));
        assert!(
            first.recheck,
            "a job change seen before the copy still applies"
        );
        let other = due.iter().find(|o| o.task.task_id.as_u128() == 2).unwrap();
        assert!(!other.recheck);
    }
}
