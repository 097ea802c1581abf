//! The README's demo command runs unattended for a set time and shows results, and fails
//! loudly when its chimed cannot start.

use std::process::Command;

use chime_tests::{TestVhost, binaries, chimed::free_port};
use reqwest::Method;

use crate::support::{Setup, StoreKind};

#[test]
fn demo_runs_for_a_duration_and_shows_succeeded_runs() {
    let vhost = TestVhost::new();
    let dir = binaries::scratch_dir("demo");
    // Build first so the demo's own cargo build is a no-op.
    binaries::binary("chimed");
    let output = Command::new("bash")
        .arg(binaries::workspace_root().join("deploy/local/demo.sh"))
        .args(["--for", "12s"])
        .env("CHIME_AMQP_URL", vhost.amqp_url())
        .env("CHIME_HTTP_ADDR", format!("127.0.0.1:{}", free_port()))
        .env("CHIME_DEMO_DIR", &dir)
        .output()
        .expect("run deploy/local/demo.sh");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "demo failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    for expected in ["heartbeat", "nightly-report", "succeeded", "hello, chime"] {
        assert!(
            stdout.contains(expected),
            "demo output lacks {expected:?}:\n{stdout}\nstderr:\n{stderr}"
        );
    }
    assert!(
        dir.join("chime.db").exists(),
        "chimed without configuration made ./chime.db"
    );
    let pids = std::fs::read_to_string(dir.join("pids")).expect("the demo records what it started");
    assert_eq!(pids.lines().count(), 2, "chimed and the consumer");
    for pid in pids.lines() {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "the demo stopped process {pid} it started"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_fails_loudly_when_another_chimed_holds_its_port() {
    // Another chimed already answers on the demo's address: the demo's own cannot
    // listen, and the demo must not create its jobs on the other one.
    let other = Setup::new(StoreKind::Sqlite).await;
    let port = other.chimed.port();
    let vhost = TestVhost::new();
    let dir = binaries::scratch_dir("demo-port-taken");
    let output = tokio::task::spawn_blocking(move || {
        Command::new("bash")
            .arg(binaries::workspace_root().join("deploy/local/demo.sh"))
            .args(["--for", "5s"])
            .env("CHIME_AMQP_URL", vhost.amqp_url())
            .env("CHIME_HTTP_ADDR", format!("127.0.0.1:{port}"))
            .env("CHIME_DEMO_DIR", &dir)
            .output()
            .expect("run deploy/local/demo.sh")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "the demo fails\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        !stderr.contains("demo finished") && !stderr.contains("creating demo jobs"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("listening on 127.0.0.1:{port}")),
        "the demo shows chimed's own error from its log:\n{stderr}"
    );
    assert!(
        stderr.contains("[chime] error: ")
            && (stderr.contains("another chimed") || stderr.contains("chimed exited")),
        "{stderr}"
    );
    let jobs = other.chimed.api.call(Method::GET, "/v1/jobs", None).await.1;
    assert_eq!(
        jobs["items"].as_array().map(Vec::len),
        Some(0),
        "no demo job on the other chimed: {jobs}"
    );
}
