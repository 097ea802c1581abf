//! The idempotency key: a run's id, derived deterministically from what identifies a fire,
//! so any node that records the same fire computes the same id and the store's unique key
//! rejects the second record.

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// Namespace of Chime run ids (UUID version 5).
pub const RUN_ID_NAMESPACE: Uuid = Uuid::from_u128(0x6368_696d_652d_7275_6e2d_6964_2d76_3101);

/// The run id (task id, idempotency key) of shard `shard` of the fire of job `job_id`
/// scheduled at `fire_time`: UUIDv5 over `"{job_id}/{fire_time in unix ms}/{shard}"`.
/// Sub-millisecond parts of `fire_time` do not change the id.
///
/// ```
/// use chime_consumer::protocol::run_id;
/// let job = uuid::Uuid::nil();
/// let at = "2026-11-21T10:00:00Z".parse().unwrap();
/// assert_eq!(run_id(job, at, 0), run_id(job, at, 0));
/// assert_ne!(run_id(job, at, 0), run_id(job, at, 1));
/// assert_eq!(run_id(job, at, 0).to_string(), "13bbd270-b3e0-52e4-b681-5cf5d8e0bca0");
/// ```
pub fn run_id(job_id: Uuid, fire_time: DateTime<Utc>, shard: u32) -> Uuid {
    let name = format!("{job_id}/{}/{shard}", fire_time.timestamp_millis());
    Uuid::new_v5(&RUN_ID_NAMESPACE, name.as_bytes())
}

/// The run id of a manual fire (`POST /v1/jobs/{id}/trigger`) of job `job_id` at `at`:
/// UUIDv5 over `"{job_id}/manual/{at in unix ms}"`, so it never equals the id of a
/// scheduled fire at the same millisecond.
pub fn manual_run_id(job_id: Uuid, at: DateTime<Utc>) -> Uuid {
    let name = format!("{job_id}/manual/{}", at.timestamp_millis());
    Uuid::new_v5(&RUN_ID_NAMESPACE, name.as_bytes())
}

/// The run id of one item of a fire, for every delivery mode: [`run_id`] /
/// [`manual_run_id`] for shard items (shard 0 is the whole fire of an unsharded job), and
/// for a zone item UUIDv5 over `"{job_id}/{fire_time ms}/zone/{zone}"` (manual:
/// `"{job_id}/manual/{at ms}/zone/{zone}"`), so a zone's item keeps its id whichever other
/// zones take part. A manual fire's shard `s > 0` uses `"{job_id}/manual/{at ms}/{s}"`.
pub fn item_run_id(
    job_id: Uuid,
    fire_time: DateTime<Utc>,
    manual: bool,
    shard: u32,
    zone: Option<&str>,
) -> Uuid {
    let ms = fire_time.timestamp_millis();
    let name = match (manual, zone) {
        (false, None) => return run_id(job_id, fire_time, shard),
        (true, None) if shard == 0 => return manual_run_id(job_id, fire_time),
        (true, None) => format!("{job_id}/manual/{ms}/{shard}"),
        (false, Some(zone)) => format!("{job_id}/{ms}/zone/{zone}"),
        (true, Some(zone)) => format!("{job_id}/manual/{ms}/zone/{zone}"),
    };
    Uuid::new_v5(&RUN_ID_NAMESPACE, name.as_bytes())
}

/// The idempotency key of a broadcast task on consumer instance `instance`: every
/// instance runs a broadcast fire once, so the key is per (task, instance) — UUIDv5 in
/// the task id's namespace over the instance id.
pub fn broadcast_idempotency_key(task_id: Uuid, instance: &str) -> Uuid {
    Uuid::new_v5(&task_id, instance.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    #[test]
    fn differs_by_job_time_and_shard() {
        let job = Uuid::from_u128(42);
        let at: DateTime<Utc> = "2026-11-21T10:00:00Z".parse().unwrap();
        let id = run_id(job, at, 0);
        assert_ne!(id, run_id(Uuid::from_u128(43), at, 0));
        assert_ne!(id, run_id(job, at + Duration::milliseconds(1), 0));
        assert_ne!(id, run_id(job, at, 1));
        assert_eq!(id, run_id(job, at + Duration::microseconds(999), 0));
        assert_ne!(
            id,
            manual_run_id(job, at),
            "a manual fire never merges with a scheduled one"
        );
    }

    #[test]
    fn item_ids_are_distinct_and_stable() {
        let job = Uuid::from_u128(42);
        let at: DateTime<Utc> = "2026-11-21T10:00:00Z".parse().unwrap();
        assert_eq!(item_run_id(job, at, false, 3, None), run_id(job, at, 3));
        assert_eq!(item_run_id(job, at, true, 0, None), manual_run_id(job, at));
        let ids = [
            item_run_id(job, at, false, 0, None),
            item_run_id(job, at, true, 1, None),
            item_run_id(job, at, false, 0, Some("dc1")),
            item_run_id(job, at, false, 0, Some("dc2")),
            item_run_id(job, at, true, 0, Some("dc1")),
        ];
        let unique: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len());
        // A zone item's id does not depend on its position among the zones.
        assert_eq!(
            item_run_id(job, at, false, 0, Some("dc2")),
            item_run_id(job, at, false, 1, Some("dc2"))
        );
        let task = ids[0];
        assert_ne!(
            broadcast_idempotency_key(task, "a"),
            broadcast_idempotency_key(task, "b")
        );
        assert_eq!(
            broadcast_idempotency_key(task, "a"),
            broadcast_idempotency_key(task, "a")
        );
    }
}
