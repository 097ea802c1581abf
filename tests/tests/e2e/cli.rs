//! chimectl against a real chimed.

use std::process::{Command, Output};

use chime_tests::binaries;
use serde_json::Value;

use crate::support::{Setup, StoreKind};

fn chimectl(server: &str, args: &[&str]) -> Output {
    Command::new(binaries::binary("chimectl"))
        .arg("--server")
        .arg(server)
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
    let server = s.chimed.api.base().to_string();
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

async fn job_node(server: &str) -> String {
    let status = chime_tests::api::Api::new(server)
        .call(reqwest::Method::GET, "/v1/cluster", None)
        .await
        .1;
    status["this_node"].as_str().unwrap().to_string()
}
