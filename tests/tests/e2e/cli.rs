//! chimectl against a real chimed.

use std::process::{Command, Output};

use chime_tests::{api::Api, binaries};
use serde_json::Value;

use crate::support::{Setup, StoreKind};

fn chimectl(api: &Api, args: &[&str]) -> Output {
    binaries::chimectl(api)
        .args(args)
        .output()
        .expect("run chimectl")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chimectl_manages_jobs_and_reports_errors() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let server = s.chimed.api.clone();
    let run = |args: Vec<&'static str>| {
        let server = server.clone();
        tokio::task::spawn_blocking(move || chimectl(&server, &args))
    };

    let added = run(vec![
        "job",
        "add",
        "--app",
        "shop",
        "--name",
        "close",
        "--cron",
        "0 */2 * * * *",
        "--timezone",
        "Asia/Shanghai",
        "--group",
        "orders",
        "--payload",
        "{\"older_than_min\": 30}",
    ])
    .await
    .unwrap();
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );
    assert!(stdout(&added).contains("Asia/Shanghai"));

    let got = run(vec!["--json", "job", "get", "shop/close"])
        .await
        .unwrap();
    let job: Value = serde_json::from_str(&stdout(&got)).expect("--json prints JSON");
    assert_eq!(job["payload"]["older_than_min"], 30);
    assert_eq!(job["target"]["group"], "orders");

    let listed = run(vec!["job", "ls"]).await.unwrap();
    assert!(stdout(&listed).contains("close") && stdout(&listed).contains("NEXT FIRE"));

    let bad = run(vec![
        "job",
        "add",
        "--name",
        "x",
        "--cron",
        "0 61 * * * *",
        "--group",
        "g",
    ])
    .await
    .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("schedule.cron"));

    let triggered = run(vec!["job", "trigger", "shop/close"]).await.unwrap();
    assert!(stdout(&triggered).contains("triggered job"));
    let runs = run(vec!["--json", "run", "ls", "shop/close"])
        .await
        .unwrap();
    let runs: Value = serde_json::from_str(&stdout(&runs)).unwrap();
    // The cron fires every even minute and is armed 2 s ahead, so near one a scheduled
    // run can list before the manual one: find it by its trigger.
    let manual: Vec<&Value> = runs["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|run| run["trigger"] == "manual")
        .collect();
    assert_eq!(manual.len(), 1, "{runs}");

    assert_eq!(manual[0]["fired_by"], job_node(&server).await);

    // Runs across jobs, filtered as GET /v1/runs filters them.
    let across = run(vec![
        "--json", "run", "ls", "--app", "shop", "--limit", "50",
    ])
    .await
    .unwrap();
    assert!(
        across.status.success(),
        "{}",
        String::from_utf8_lossy(&across.stderr)
    );
    let across: Value = serde_json::from_str(&stdout(&across)).unwrap();
    assert!(
        across["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|run| run["id"] == manual[0]["id"]),
        "{across}"
    );
    let elsewhere = run(vec!["--json", "run", "ls", "--app", "nobody"])
        .await
        .unwrap();
    let elsewhere: Value = serde_json::from_str(&stdout(&elsewhere)).unwrap();
    assert_eq!(elsewhere["items"], serde_json::json!([]), "{elsewhere}");
    let table = stdout(&run(vec!["run", "ls", "--app", "shop"]).await.unwrap());
    assert!(
        table.contains("JOB") && table.contains("FIRE TIME"),
        "{table}"
    );
    let refused = run(vec!["run", "ls", "--state", "done"]).await.unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("state"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    // Delivery modes: flags into the target, shown in tables; a fire of several items
    // lists them.
    let sharded = run(vec![
        "job",
        "add",
        "--app",
        "shop",
        "--name",
        "statements",
        "--every",
        "1h",
        "--group",
        "billing",
        "--mode",
        "sharded",
        "--shards",
        "3",
    ])
    .await
    .unwrap();
    assert!(
        sharded.status.success(),
        "{}",
        String::from_utf8_lossy(&sharded.stderr)
    );
    let zoned = run(vec![
        "job", "add", "--app", "shop", "--name", "caches", "--every", "1h", "--group", "web",
        "--mode", "zone", "--zones", "dc1,dc2",
    ])
    .await
    .unwrap();
    assert!(
        zoned.status.success(),
        "{}",
        String::from_utf8_lossy(&zoned.stderr)
    );
    let listed = stdout(&run(vec!["job", "ls", "--app", "shop"]).await.unwrap());
    assert!(
        listed.contains("MODE")
            && listed.contains("sharded(3)")
            && listed.contains("zone(dc1,dc2)"),
        "{listed}"
    );
    let bad_mode = run(vec![
        "job", "add", "--name", "y", "--every", "1h", "--group", "g", "--mode", "sharded",
    ])
    .await
    .unwrap();
    assert_eq!(bad_mode.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad_mode.stderr).contains("target.shards"));
    let fired = run(vec!["--json", "job", "trigger", "shop/statements"])
        .await
        .unwrap();
    let fired: Value = serde_json::from_str(&stdout(&fired)).expect("--json prints JSON");
    assert_eq!(fired["mode"], "sharded");
    assert_eq!(fired["items"].as_array().map(Vec::len), Some(3), "{fired}");
    let second = fired["items"][1]["id"].as_str().unwrap().to_string();
    let shown = tokio::task::spawn_blocking({
        let server = server.clone();
        move || chimectl(&server, &["run", "get", &second])
    })
    .await
    .unwrap();
    let shown = stdout(&shown);
    assert!(
        shown.contains("1/3") && shown.contains("items of this fire") && shown.contains("1 *"),
        "{shown}"
    );

    // A single SQLite node holds every shard.
    let cluster = run(vec!["cluster"]).await.unwrap();
    let table = stdout(&cluster);
    assert!(
        table.contains("sqlite store, 256 shards") && table.contains("0-255"),
        "{table}"
    );

    let removed = run(vec!["job", "rm", "shop/close"]).await.unwrap();
    assert!(removed.status.success());
    let gone = run(vec!["job", "get", "shop/close"]).await.unwrap();
    assert_eq!(gone.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&gone.stderr).contains("no job named"));
}

async fn job_node(api: &Api) -> String {
    let status = api.call(reqwest::Method::GET, "/v1/cluster", None).await.1;
    status["this_node"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chimectl_edits_jobs_and_shows_what_a_schedule_runs() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let server = s.chimed.api.clone();
    let run = |args: Vec<String>| {
        let server = server.clone();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            chimectl(&server, &args)
        })
    };
    let ok = |output: Output| {
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout(&output)
    };
    let words = |line: &str| {
        line.split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let args = |text: &str| words(text);

    // A 5-field line is shown as it runs, beside what was written.
    let owned = |argv: &[&str]| argv.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    ok(run(owned(&[
        "job",
        "add",
        "--app",
        "shop",
        "--name",
        "tidy",
        "--cron",
        "*/5 * * * *",
        "--group",
        "ops",
    ]))
    .await
    .unwrap());
    let listed = ok(run(args("job ls --app shop")).await.unwrap());
    assert!(
        listed.contains("cron 0 */5 * * * * (UTC; written */5 * * * *)"),
        "{listed}"
    );
    let shown = ok(run(args("job get shop/tidy")).await.unwrap());
    assert!(
        shown.contains("sec 0, min */5, hour *") && shown.contains("next fires"),
        "{shown}"
    );

    // Edit: only the fields named change; the version read guards the change.
    let edited = ok(run(args(
        "--json job edit shop/tidy --max-attempts 9 --overlap forbid --run-timeout 20m",
    ))
    .await
    .unwrap());
    let job: Value = serde_json::from_str(&edited).expect("--json prints JSON");
    assert_eq!(job["max_attempts"], 9);
    assert_eq!(job["overlap"], "forbid");
    assert_eq!(job["run_timeout"], "20m");
    assert_eq!(job["schedule"]["cron"], "*/5 * * * *", "untouched");
    assert_eq!(job["version"], 2);
    let stale = run(args("job edit shop/tidy --if-version 1 --max-attempts 3"))
        .await
        .unwrap();
    assert_eq!(stale.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&stale.stderr).contains("version_conflict"),
        "{}",
        String::from_utf8_lossy(&stale.stderr)
    );
    let moved = ok(run(args("--json job edit shop/tidy --timezone Asia/Tokyo"))
        .await
        .unwrap());
    let job: Value = serde_json::from_str(&moved).unwrap();
    assert_eq!(
        job["schedule"],
        serde_json::json!({"cron": "*/5 * * * *", "timezone": "Asia/Tokyo"})
    );
    // From a file: an edited `job get --json`, version included.
    let file = chime_tests::binaries::scratch_dir("cli-edit").join("job.json");
    let mut body = job.clone();
    body["payload"] = serde_json::json!({"from": "file"});
    std::fs::write(&file, body.to_string()).unwrap();
    let from_file = ok(run(owned(&[
        "--json",
        "job",
        "edit",
        "shop/tidy",
        "-f",
        &file.display().to_string(),
    ]))
    .await
    .unwrap());
    let job: Value = serde_json::from_str(&from_file).unwrap();
    assert_eq!(job["payload"]["from"], "file");

    // --timezone only goes with --cron.
    let refused = run(args("job add --name x --every 1m --group g --timezone UTC"))
        .await
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("cannot be used with"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    // A paused job's next fire reads `paused`; synonyms work.
    ok(run(args("job pause shop/tidy")).await.unwrap());
    let listed = ok(run(args("job list --app shop")).await.unwrap());
    let row = listed.lines().find(|l| l.contains("tidy")).unwrap();
    assert_eq!(
        words(row).last().map(String::as_str),
        Some("paused"),
        "{listed}"
    );
    ok(run(args("job delete shop/tidy")).await.unwrap());
}

#[test]
fn chimectl_says_what_to_do_when_chimed_is_not_there() {
    let port = chime_tests::chimed::free_port();
    let server = format!("http://127.0.0.1:{port}");
    let output = chimectl(&Api::new(server.clone()), &["job", "ls"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr).trim(),
        format!(
            "error: connection refused: is chimed running at {server}? set --server or CHIME_SERVER"
        )
    );
    let version = Command::new(binaries::binary("chimectl"))
        .arg("--version")
        .output()
        .expect("run chimectl");
    assert_eq!(
        stdout(&version).trim(),
        format!(
            "chimectl {} (commit {})",
            env!("CARGO_PKG_VERSION"),
            chime_scheduler::GIT_COMMIT
        )
    );
    let version = Command::new(binaries::binary("chimed"))
        .arg("--version")
        .output()
        .expect("run chimed");
    assert!(
        stdout(&version).starts_with("chimed "),
        "{}",
        stdout(&version)
    );
}

#[test]
fn chimed_start_up_errors_are_one_message_without_a_backtrace() {
    let dir = binaries::scratch_dir("startup-errors");
    let chimed = |env: &[(&str, String)]| {
        Command::new(binaries::binary("chimed"))
            .current_dir(&dir)
            .env("RUST_BACKTRACE", "full")
            .env(
                "CHIME_DATABASE_URL",
                format!("sqlite://{}", dir.join("chime.db").display()),
            )
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("run chimed")
    };
    let no_backtrace = |output: &Output| {
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(!stderr.to_lowercase().contains("backtrace"), "{stderr}");
        assert!(
            !stderr.contains("Error: "),
            "not Rust's default report: {stderr}"
        );
        stderr
    };

    // A bad setting: refused before anything starts, as one line.
    let bad = chimed(&[("CHIME_HTTP_ADDR", "nonsense".into())]);
    let stderr = no_backtrace(&bad);
    assert_eq!(
        stderr.trim(),
        "chimed: error: invalid http_addr \"nonsense\" (from environment CHIME_HTTP_ADDR): invalid socket address syntax"
    );

    // A port in use: the error comes after start-up has begun.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port");
    let addr = taken.local_addr().unwrap().to_string();
    let busy = chimed(&[("CHIME_HTTP_ADDR", addr.clone())]);
    let stderr = no_backtrace(&busy);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!("chimed: error: listening on {addr}: ")),
        "{stderr}"
    );
}
