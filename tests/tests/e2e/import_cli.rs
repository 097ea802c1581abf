//! `chimectl job import` against a real chimed, on each store: a JSON array file, NDJSON
//! on standard input split into two requests, `--json`, an imported job that fires, and
//! a refused file that names each bad line and stores nothing.

use std::{
    io::Write,
    process::{Output, Stdio},
    time::Duration,
};

use chime_tests::{JobSpec, api::Api, binaries, wait};
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{Setup, StoreKind};

/// Runs `chimectl --server server args`, with `stdin` on its standard input.
fn chimectl(server: &Api, args: &[&str], stdin: &str) -> Output {
    let mut child = binaries::chimectl(server)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run chimectl");
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(stdin.as_bytes())
        .expect("write chimectl's stdin");
    child.wait_with_output().expect("chimectl ends")
}

/// A directory of this test's own, removed at the end.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> Self {
        let path = std::env::temp_dir().join(format!("chime-import-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&path).expect("create a temporary directory");
        Self(path)
    }

    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn hourly(name: &str) -> Value {
    JobSpec::new("import", name)
        .every("1h")
        .group("import-g")
        .build()
}

async fn job_count(s: &Setup) -> usize {
    let mut count = 0;
    let mut cursor = String::new();
    loop {
        let (_, page) = s
            .chimed
            .api
            .call(Method::GET, &format!("/v1/jobs?limit=1000{cursor}"), None)
            .await;
        count += page["items"].as_array().expect("a job list").len();
        match page["next"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => return count,
        }
    }
}

async fn chimectl_imports_json_and_ndjson(kind: StoreKind) {
    let s = Setup::new(kind).await;
    let server = s.chimed.api.clone();
    let run = |args: Vec<String>, stdin: String| {
        let server = server.clone();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            chimectl(&server, &args, &stdin)
        })
    };
    let dir = TempDir::new();

    // A JSON array file, one of its jobs firing every second.
    let mut jobs: Vec<Value> = (0..99).map(|i| hourly(&format!("array-{i}"))).collect();
    jobs.push(
        JobSpec::new("import", "ticker")
            .every("1s")
            .group("import-g")
            .build(),
    );
    let array = dir.path().join("jobs.json");
    std::fs::write(&array, Value::Array(jobs).to_string()).unwrap();
    let args = vec!["job".into(), "import".into(), array.display().to_string()];
    let out = run(args, String::new()).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.trim(), "imported 100 jobs");
    assert_eq!(job_count(&s).await, 100);
    // The timer heard of the batch: the imported every-second job fires.
    let (_, page) = s
        .chimed
        .api
        .call(Method::GET, "/v1/jobs?app=import&limit=1000", None)
        .await;
    let ticker = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|job| job["name"] == "ticker")
        .expect("the ticker job")["id"]
        .as_str()
        .unwrap()
        .to_string();
    wait::until(
        "the imported job to fire",
        Duration::from_secs(15),
        || async { (!s.chimed.api.runs(&ticker).await.is_empty()).then_some(()) },
    )
    .await;

    // NDJSON on standard input, over 10 000 jobs: two requests.
    let ndjson: String = (0..10_050)
        .map(|i| format!("{}\n", hourly(&format!("line-{i}"))))
        .collect();
    let args = vec!["job".into(), "import".into(), "-".into()];
    let out = run(args, ndjson).await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "imported 10050 jobs in 2 requests"
    );
    assert_eq!(job_count(&s).await, 10_150);

    // --json prints the API's answer.
    let args = vec!["--json".into(), "job".into(), "import".into(), "-".into()];
    let out = run(args, format!("{}\n", hourly("json-1"))).await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    assert_eq!(answer["items"][0]["name"], "json-1");
    assert_eq!(answer["items"][0]["version"], 1);

    // A refused file: every bad line is named, and nothing of it is stored.
    let mut bad_cron = hourly("bad-cron");
    bad_cron["schedule"] = json!({"cron": "0 61 * * * *"});
    let lines = [
        hourly("fresh-1"),
        bad_cron,
        hourly("fresh-2"),
        hourly("fresh-1"),
    ];
    let ndjson: String = lines.iter().map(|job| format!("{job}\n")).collect();
    let file = dir.path().join("bad.ndjson");
    std::fs::write(&file, ndjson).unwrap();
    let args = vec!["job".into(), "import".into(), file.display().to_string()];
    let out = run(args, String::new()).await.unwrap();
    let errors = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a refused import fails");
    assert!(errors.contains("nothing of it was stored"), "{errors}");
    assert!(
        errors.contains("line 2: invalid_field (schedule.cron)"),
        "{errors}"
    );
    assert!(errors.contains("line 4: duplicate_name (name)"), "{errors}");
    assert!(errors.contains("2 jobs refused"), "{errors}");
    assert_eq!(job_count(&s).await, 10_151);
    // Names stored before are refused too, once every job is valid.
    let taken: String = [hourly("fresh-3"), hourly("array-5")]
        .iter()
        .map(|job| format!("{job}\n"))
        .collect();
    let args = vec!["job".into(), "import".into(), "-".into()];
    let out = run(args, taken).await.unwrap();
    let errors = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a refused import fails");
    assert!(errors.contains("line 2: duplicate_name (name)"), "{errors}");
    assert_eq!(job_count(&s).await, 10_151);
}

crate::per_store!(chimectl_imports_json_and_ndjson);
