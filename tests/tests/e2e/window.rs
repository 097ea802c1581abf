//! A job's fire window and jitter in real fires: only the fires from `start_at` to
//! `end_at` happen, the job then shows as finished, and each task goes out no earlier
//! than its fire time plus the jitter the preview announced, while the run keeps its
//! nominal fire time (and its deterministic id).

use std::time::Duration;

use chime_scheduler::domain::Window;
use chime_tests::{TestConsumer, api::in_state, wait};
use chrono::{DateTime, SecondsFormat, Utc};
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    per_store,
    support::{Setup, StoreKind},
};

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str()
        .unwrap_or_else(|| panic!("a timestamp: {v}"))
        .parse()
        .expect("RFC 3339")
}

fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

async fn a_window_and_jitter_shape_real_fires(kind: StoreKind) {
    let s = Setup::new(kind).await;
    let _consumer = TestConsumer::start(&s.vhost.amqp_url(), "windowed", "w1", &[]).await;
    // Whole seconds, far enough ahead for a loaded machine: four fires, start and end
    // included.
    let start = DateTime::from_timestamp(Utc::now().timestamp() + 10, 0).unwrap();
    let end = start + chrono::Duration::seconds(3);
    let job = s
        .chimed
        .api
        .create_job(json!({
            "name": "windowed", "schedule": {"every": "1s"},
            "target": {"group": "windowed"},
            "start_at": ts(start), "end_at": ts(end), "jitter": "2s",
        }))
        .await;
    let id = job["id"].as_str().unwrap().to_string();
    assert_eq!(job["finished"], false);
    let nominal: Vec<_> = (0..4)
        .map(|i| start + chrono::Duration::seconds(i))
        .collect();
    // When each fire is due: computed as the scheduler computes it.
    let window = Window::parse(Some(&ts(start)), Some(&ts(end)), Some("2s")).unwrap();
    let job_id = id.parse().unwrap();
    let due: Vec<_> = nominal
        .iter()
        .map(|t| window.due_time(job_id, *t))
        .collect();
    assert!(
        due.iter().zip(&nominal).any(|(d, n)| d > n),
        "some fire is jittered: {due:?}"
    );

    // The preview names the fires still ahead and when each goes out.
    let (status, preview) = s
        .chimed
        .api
        .call(Method::GET, &format!("/v1/jobs/{id}/preview"), None)
        .await;
    assert!(status.is_success(), "{preview}");
    let fires = preview["fires"].as_array().unwrap();
    assert!(!fires.is_empty() && fires.len() <= 4, "{preview}");
    for fire in fires {
        let i = nominal
            .iter()
            .position(|t| *t == time(&fire["at"]))
            .unwrap_or_else(|| panic!("a fire outside the window: {fire}"));
        assert_eq!(time(&fire["due"]), due[i], "{fire}");
    }

    let runs = wait::until("four fires to succeed", Duration::from_secs(40), || async {
        let runs = s.chimed.api.runs(&id).await;
        (in_state(&runs, "succeeded").len() >= 4).then_some(runs)
    })
    .await;
    // Past the end and its jitter: nothing more fires, and the job is finished.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = s.chimed.api.runs(&id).await;
    assert_eq!(
        after.len(),
        4,
        "only the fires inside the window: {after:?}"
    );
    let job = s.chimed.api.job(&id).await;
    assert_eq!(job["next_fire_at"], Value::Null);
    assert_eq!(job["finished"], true);

    for run in &runs {
        let fire_time = time(&run["fire_time"]);
        let i = nominal
            .iter()
            .position(|t| *t == fire_time)
            .unwrap_or_else(|| panic!("fire time {fire_time} is outside the window"));
        let dispatched = time(&run["dispatched_at"]);
        assert!(
            dispatched >= due[i],
            "published at {dispatched}, before its jittered time {}",
            due[i]
        );
        assert!(
            dispatched - due[i] < chrono::Duration::seconds(10),
            "published long after it was due: {run}"
        );
        let key = chime_consumer::protocol::run_id(id.parse().unwrap(), fire_time, 0);
        assert_eq!(run["id"], key.to_string(), "run ids stay deterministic");
    }
}

per_store!(a_window_and_jitter_shape_real_fires);
