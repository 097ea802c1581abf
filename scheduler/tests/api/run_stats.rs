//! `GET /v1/stats/runs`: run statistics of a recent window through the router — the
//! numbers of runs with known states and dispatch times, every bucket present, the
//! answer kept for 5 s, a scoped token counting only its apps' runs, and each bad
//! parameter a 400 naming it.

use axum::{body::Body, http::header};
use chime_scheduler::domain::{Run, RunState, RunTrigger};
use chrono::{DateTime, Duration, Utc};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{Answer, TestApp, hourly, id, request};

/// Creates job `name` of app `app_name`; returns its id.
async fn job(app: &TestApp, name: &str, app_name: &str) -> Uuid {
    let mut spec = hourly(name);
    spec["app"] = json!(app_name);
    id(&app.create(&spec).await).parse().unwrap()
}

/// Records a run of `job` fired at `at`, then moves it to `state` on `attempt`,
/// dispatched `lateness_ms` after its fire time when given.
async fn run(
    app: &TestApp,
    job: Uuid,
    at: DateTime<Utc>,
    state: RunState,
    attempt: u32,
    lateness_ms: Option<i64>,
) {
    let recorded = Run::new(job, at, RunTrigger::Manual, json!(null), Utc::now());
    assert!(app.store.insert_run(&recorded).await.unwrap());
    let dispatched = lateness_ms.map(|ms| recorded.fire_time + Duration::milliseconds(ms));
    let changed = app
        .store
        .update_run(recorded.id, &move |run: &mut Run, _| {
            run.state = state;
            run.attempt = attempt;
            run.dispatched_at = dispatched;
            true
        })
        .await
        .unwrap();
    assert!(changed.is_some_and(|(changed, _)| changed));
}

async fn get_as(app: &TestApp, token: &str, path: &str) -> Answer {
    let builder =
        request(Method::GET, path).header(header::AUTHORIZATION, format!("Bearer {token}"));
    app.send(builder.body(Body::empty()).unwrap()).await
}

fn fired_by_bucket(answer: &Value) -> Vec<u64> {
    answer["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["fired"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn get_run_stats_counts_the_window_bucket_by_bucket() {
    let app = TestApp::new().await;
    let shop = job(&app, "close", "shop").await;
    let mail = job(&app, "send", "mail").await;
    let now = Utc::now();
    let earlier = now - Duration::seconds(100);
    // Two minutes of runs (the window of 5 holds them however the clock turns).
    run(&app, shop, earlier, RunState::Succeeded, 1, Some(4)).await;
    run(
        &app,
        shop,
        earlier + Duration::milliseconds(1),
        RunState::Succeeded,
        1,
        Some(3),
    )
    .await;
    run(
        &app,
        shop,
        earlier + Duration::milliseconds(2),
        RunState::Dead,
        3,
        Some(1),
    )
    .await;
    run(
        &app,
        mail,
        now - Duration::seconds(1),
        RunState::Failed,
        1,
        Some(35),
    )
    .await;
    run(
        &app,
        mail,
        now - Duration::seconds(2),
        RunState::Scheduled,
        1,
        None,
    )
    .await;
    // Outside the window.
    run(
        &app,
        shop,
        now - Duration::hours(2),
        RunState::Succeeded,
        1,
        Some(1),
    )
    .await;

    let answer = app.get("/v1/stats/runs?minutes=5").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let body = &answer.body;
    assert_eq!(body["bucket_s"], 60);
    let from: DateTime<Utc> = body["from"].as_str().unwrap().parse().unwrap();
    let to: DateTime<Utc> = body["to"].as_str().unwrap().parse().unwrap();
    assert_eq!(to - from, Duration::minutes(5));
    assert_eq!(from.timestamp() % 60, 0, "aligned to the bucket size");
    let buckets = body["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 5, "every bucket present: {body}");
    assert_eq!(buckets[0]["at"], body["from"]);
    assert_eq!(
        fired_by_bucket(body).iter().sum::<u64>(),
        5,
        "the two hours old run is outside: {body}"
    );
    // The bucket of the three runs fired 100 s ago.
    let at = |t: DateTime<Utc>| ((t - from).num_seconds() / 60) as usize;
    let first = &buckets[at(earlier)];
    assert_eq!(first["fired"], 3);
    assert_eq!(first["succeeded"], 2);
    assert_eq!(first["dead"], 1);
    assert_eq!(first["retried"], 1);
    assert_eq!(first["lateness_ms"], json!({"p50": 5, "p95": 5, "p99": 5}));
    let empty = buckets
        .iter()
        .find(|b| b["fired"] == 0)
        .expect("an empty bucket");
    assert_eq!(
        empty["lateness_ms"],
        json!({"p50": null, "p95": null, "p99": null})
    );

    let totals = &body["totals"];
    assert_eq!(totals["fired"], 5);
    assert_eq!(totals["retried"], 1);
    assert_eq!(totals["dead"], 1);
    assert_eq!(
        totals["by_state"],
        json!({"scheduled": 1, "dispatched": 0, "acked": 0, "succeeded": 2, "failed": 1,
               "dead": 1, "cancelled": 0})
    );
    // Three measured (the dead run is on attempt 3): 4 and 3 ms (<= 5), 35 ms (<= 50).
    assert_eq!(
        totals["lateness_ms"],
        json!({"p50": 5, "p95": 50, "p99": 50})
    );
    assert!(totals["fires_per_s"].as_f64().unwrap() > 0.0);

    // The answer is kept for 5 s per (apps, minutes): a new run shows in another window
    // at once, in this one only later.
    run(
        &app,
        shop,
        now - Duration::seconds(3),
        RunState::Succeeded,
        1,
        Some(1),
    )
    .await;
    let again = app.get("/v1/stats/runs?minutes=5").await;
    assert_eq!(again.body, answer.body, "served from the cache");
    let other = app.get("/v1/stats/runs?minutes=6").await;
    assert_eq!(other.body["totals"]["fired"], 6);
    let shop_only = app.get("/v1/stats/runs?minutes=5&app=shop").await;
    assert_eq!(shop_only.body["totals"]["fired"], 4);

    // The default window is the last hour, in minutes.
    let hour = app.get("/v1/stats/runs").await;
    assert_eq!(hour.status, StatusCode::OK, "{}", hour.body);
    assert_eq!(hour.body["buckets"].as_array().unwrap().len(), 60);
    assert_eq!(hour.body["totals"]["fired"], 6);
}

#[tokio::test]
async fn get_run_stats_counts_only_a_scoped_tokens_apps() {
    let app = TestApp::new().await;
    let shop = job(&app, "close", "shop").await;
    let mail = job(&app, "send", "mail").await;
    let now = Utc::now();
    run(
        &app,
        shop,
        now - Duration::seconds(5),
        RunState::Succeeded,
        1,
        Some(2),
    )
    .await;
    run(
        &app,
        mail,
        now - Duration::seconds(6),
        RunState::Dead,
        2,
        None,
    )
    .await;
    run(
        &app,
        mail,
        now - Duration::seconds(7),
        RunState::Succeeded,
        1,
        Some(20),
    )
    .await;
    let created = app
        .json(
            Method::POST,
            "/v1/tokens",
            &json!({"name": "mail-reader", "role": "reader", "apps": ["mail"]}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let token = created.body["token"].as_str().unwrap();

    let mine = get_as(&app, token, "/v1/stats/runs?minutes=5").await;
    assert_eq!(mine.status, StatusCode::OK, "{}", mine.body);
    assert_eq!(mine.body["totals"]["fired"], 2, "{}", mine.body);
    assert_eq!(mine.body["totals"]["by_state"]["dead"], 1);
    assert_eq!(mine.body["totals"]["by_state"]["succeeded"], 1);
    let named = get_as(&app, token, "/v1/stats/runs?minutes=5&app=mail").await;
    assert_eq!(named.body["totals"]["fired"], 2);
    get_as(&app, token, "/v1/stats/runs?app=shop")
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    // The admin's answer for every app is not the scoped token's cached one.
    let all = app.get("/v1/stats/runs?minutes=5").await;
    assert_eq!(all.body["totals"]["fired"], 3);
}

#[tokio::test]
async fn get_run_stats_refuses_each_bad_parameter_naming_it() {
    let app = TestApp::new().await;
    for (query, field) in [
        ("minutes=4", "minutes"),
        ("minutes=1441", "minutes"),
        ("minutes=-5", "minutes"),
        ("minutes=ten", "minutes"),
        ("minutes=", "minutes"),
        ("app=no%20spaces", "app"),
    ] {
        app.get(&format!("/v1/stats/runs?{query}"))
            .await
            .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
            .assert_field(field);
    }
    for query in ["window=5", "minutes=5&minutes=10"] {
        app.get(&format!("/v1/stats/runs?{query}"))
            .await
            .assert_error(StatusCode::BAD_REQUEST, "invalid_field");
    }
}

#[tokio::test]
async fn chimectl_run_stats_prints_the_totals_over_a_real_listener() {
    use chime_scheduler::{
        cli::{Cli, Terminal, run_with},
        daemon::http::{HttpSettings, serve},
    };
    use clap::Parser;

    let app = TestApp::new().await;
    let shop = job(&app, "close", "shop").await;
    let now = Utc::now();
    run(
        &app,
        shop,
        now - Duration::seconds(4),
        RunState::Succeeded,
        1,
        Some(7),
    )
    .await;
    run(
        &app,
        shop,
        now - Duration::seconds(5),
        RunState::Dead,
        2,
        None,
    )
    .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(serve(
        listener,
        app.router.clone(),
        HttpSettings::default(),
        stop.clone(),
    ));
    chime_scheduler::daemon::tls::install_crypto_provider();
    let token_file = std::env::temp_dir().join(format!("chime-stats-{}.token", Uuid::now_v7()));
    std::fs::write(&token_file, crate::support::ADMIN_TOKEN).unwrap();

    let chimectl = |extra: &[&str]| {
        let mut argv = vec![
            "chimectl".to_string(),
            "--server".into(),
            format!("http://{addr}"),
            "--token-file".into(),
            token_file.display().to_string(),
            "run".into(),
            "stats".into(),
            "--minutes".into(),
            "5".into(),
        ];
        argv.extend(extra.iter().map(|a| a.to_string()));
        Cli::try_parse_from(argv).unwrap()
    };
    let mut outputs = Vec::new();
    for extra in [&[][..], &["--json"][..], &["--app", "mail"][..]] {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let mut input = std::io::BufReader::new(std::io::empty());
        let mut terminal = Terminal {
            err: &mut err,
            input: &mut input,
        };
        run_with(chimectl(extra), &mut out, &mut terminal)
            .await
            .unwrap();
        outputs.push(String::from_utf8(out).unwrap());
    }
    let _ = std::fs::remove_file(&token_file);
    stop.cancel();
    let _ = server.await;

    let table = &outputs[0];
    let row = |name: &str| row_of(table, name);
    assert_eq!(row("fired"), "2", "{table}");
    assert_eq!(row("retried"), "1", "{table}");
    assert_eq!(row("dead"), "1", "{table}");
    assert_eq!(row("lateness p50"), "10", "{table}");
    let json: Value = serde_json::from_str(&outputs[1]).unwrap();
    assert_eq!(json["totals"]["fired"], 2);
    assert_eq!(json["buckets"].as_array().unwrap().len(), 5);
    assert_eq!(row_of(&outputs[2], "fired"), "0", "{}", outputs[2]);
}

/// The value of row `name` of a `chimectl run stats` table.
fn row_of(table: &str, name: &str) -> String {
    table
        .lines()
        .find(|l| l.trim_start().starts_with(name))
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or_else(|| panic!("a {name} row in\n{table}"))
        .to_string()
}
