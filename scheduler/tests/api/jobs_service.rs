//! [`chime_scheduler::app::Jobs::update`] under a concurrent change: without an expected
//! version the edit is applied again over the newer job; with one, the caller gets the
//! conflict. (Through HTTP the race cannot be placed between the read and the write.)

use std::sync::{
    Arc,
    atomic::{AtomicU32, Ordering},
};

use chime_scheduler::{
    app::JobsError,
    domain::access::Caller,
    domain::{Job, JobSpec},
};
use serde_json::json;
use tokio::runtime::Handle;
use uuid::Uuid;

use crate::support::{TestApp, hourly, id};

/// An edit that sets the payload to the version it was given, after (on its first call
/// only) storing a change of its own between the service's read and its write.
fn racing_edit(
    app: &TestApp,
    calls: Arc<AtomicU32>,
) -> impl FnMut(&Job) -> Result<JobSpec, JobsError> {
    let store = app.store.clone();
    move |current: &Job| {
        if calls.fetch_add(1, Ordering::SeqCst) == 0 {
            let mut other = current.spec.clone();
            other.settings.payload = json!("someone else");
            let newer = current.updated(other, chrono::Utc::now());
            tokio::task::block_in_place(|| {
                Handle::current().block_on(store.update_job(&newer, current.version, false))
            })
            .expect("the concurrent change");
        }
        let mut spec = current.spec.clone();
        spec.settings.payload = json!(current.version);
        Ok(spec)
    }
}

async fn job_id(app: &TestApp, name: &str) -> Uuid {
    id(&app.create(&hourly(name)).await).parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_without_a_version_applies_the_edit_again_over_a_concurrent_change() {
    let app = TestApp::new().await;
    let job = job_id(&app, "race-free").await;
    let calls = Arc::new(AtomicU32::new(0));
    let stored = app
        .jobs
        .update(
            &Caller::internal(),
            job,
            None,
            racing_edit(&app, calls.clone()),
        )
        .await
        .expect("applied over the newer job");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(stored.version, 3);
    // The second edit saw the concurrent change's version.
    assert_eq!(stored.spec.settings.payload, json!(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_with_a_version_reports_a_concurrent_change_as_a_conflict() {
    let app = TestApp::new().await;
    let job = job_id(&app, "race-named").await;
    let calls = Arc::new(AtomicU32::new(0));
    let error = app
        .jobs
        .update(
            &Caller::internal(),
            job,
            Some(1),
            racing_edit(&app, calls.clone()),
        )
        .await
        .expect_err("a conflict");
    assert!(
        matches!(
            error,
            JobsError::VersionConflict {
                expected: 1,
                current: 2
            }
        ),
        "{error:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let stored = app.jobs.get(&Caller::internal(), job).await.unwrap();
    assert_eq!(stored.spec.settings.payload, json!("someone else"));
}
