//! Run-id test vectors shared with the Python package: `consumer-py/tests/vectors/run_ids.json`
//! holds ids this crate derives, and both this test and the Python suite check every
//! vector against their own derivation, so the two implementations cannot drift apart.
//!
//! The file is checked, not rewritten: after a deliberate change to the derivation (a
//! protocol version change), regenerate it with
//! `CHIME_WRITE_VECTORS=1 cargo test -p chime-consumer --test run_id_vectors`.

use std::path::PathBuf;

use chime_consumer::protocol::{broadcast_idempotency_key, item_run_id, run_id::RUN_ID_NAMESPACE};
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

fn vectors_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../consumer-py/tests/vectors/run_ids.json")
}

/// Every vector this crate derives: scheduled and manual fires, shards and zones, times
/// with sub-millisecond parts and before 1970, and per-instance broadcast keys.
fn vectors() -> Value {
    let jobs = [
        Uuid::nil(),
        Uuid::parse_str("01a1feee-9d19-72f4-80db-4759861094af").unwrap(),
        Uuid::from_u128(u128::MAX),
    ];
    let times: Vec<DateTime<Utc>> = [
        "2026-11-21T10:00:00Z",
        "2026-11-21T10:00:00.004Z",
        "2026-11-21T10:00:00.000999999Z",
        "2030-02-28T23:59:59.999500Z",
        "1969-12-31T23:59:59.500Z",
        "1970-01-01T00:00:00Z",
    ]
    .iter()
    .map(|t| t.parse().unwrap())
    .collect();
    let mut run_ids = Vec::new();
    for job in jobs {
        for at in &times {
            for manual in [false, true] {
                for (shard, zone) in [
                    (0, None),
                    (2, None),
                    (3, None),
                    (0, Some("dc1")),
                    (1, Some("eu-west_2")),
                ] {
                    let id = item_run_id(job, *at, manual, shard, zone);
                    run_ids.push(json!({
                        "job_id": job,
                        "fire_time": at.to_rfc3339_opts(SecondsFormat::AutoSi, true),
                        "fire_ms": at.timestamp_millis(),
                        "manual": manual,
                        "shard": shard,
                        "zone": zone,
                        "id": id,
                    }));
                }
            }
        }
    }
    let tasks = [
        Uuid::parse_str("13bbd270-b3e0-52e4-b681-5cf5d8e0bca0").unwrap(),
        Uuid::nil(),
    ];
    let mut broadcast_keys = Vec::new();
    for task in tasks {
        for instance in ["web-1", "ip-10-0-0-1.ec2.internal:42", "x"] {
            broadcast_keys.push(json!({
                "task_id": task,
                "instance": instance,
                "key": broadcast_idempotency_key(task, instance),
            }));
        }
    }
    json!({
        "about": "Chime run ids (UUIDv5) derived by consumer-lib/src/protocol/run_id.rs; checked by consumer-lib/tests/run_id_vectors.rs and consumer-py/tests/test_run_id.py",
        "namespace": RUN_ID_NAMESPACE,
        "run_ids": run_ids,
        "broadcast_keys": broadcast_keys,
    })
}

#[test]
fn the_python_packages_vectors_are_this_crates_ids() {
    let expected = vectors();
    let path = vectors_path();
    if std::env::var_os("CHIME_WRITE_VECTORS").is_some() {
        let text = serde_json::to_string_pretty(&expected).unwrap() + "\n";
        std::fs::write(&path, text).expect("write the vectors");
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{} is missing ({e}); generate it with CHIME_WRITE_VECTORS=1",
            path.display()
        )
    });
    let stored: Value = serde_json::from_str(&text).expect("the vectors are JSON");
    assert_eq!(
        stored, expected,
        "the stored vectors differ from what this crate derives"
    );
    // The documented examples are among them.
    let ids: Vec<&str> = stored["run_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap())
        .collect();
    for documented in [
        "13bbd270-b3e0-52e4-b681-5cf5d8e0bca0",
        "107858a2-8988-5431-8639-7b21ef4055ca",
        "13208a6f-ef06-5cc4-b749-364431668152",
        "c47b7491-456d-5465-8728-cb4366de2b94",
        "d150363c-d020-5eae-a157-f4a0bcd2e983",
        "da26900f-7605-5502-8bb1-b6509ecca115",
    ] {
        assert!(ids.contains(&documented), "{documented} is not a vector");
    }
}
