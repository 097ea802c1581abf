//! The README's demo command runs unattended for a set time and shows results.

use std::process::Command;

use chime_tests::{TestVhost, binaries, chimed::free_port};

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
