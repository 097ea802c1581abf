//! `/v1/jobs` and `/v1/jobs/{id}[/pause|/resume|/trigger]`: each route's success and
//! each error it answers.

use axum::http::{Method, StatusCode, header};
use serde_json::json;

use crate::support::{PAYLOAD_LIMIT, TestApp, hourly, id, request};

#[tokio::test]
async fn post_jobs_creates_with_defaults_and_location() {
    let app = TestApp::new().await;
    let answer = app.json(Method::POST, "/v1/jobs", &hourly("create")).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    let job = &answer.body;
    assert_eq!(
        answer.headers[header::LOCATION],
        format!("/v1/jobs/{}", id(job)).as_str()
    );
    assert_eq!(job["version"], 1);
    assert_eq!(job["max_attempts"], 5);
    assert_eq!(job["misfire"], "fire_once");
    assert_eq!(job["target"]["mode"], "group");
    assert!(job["next_fire_at"].is_string(), "{job}");
    // Stored: readable through the store the services share.
    let stored = app
        .store
        .get_job(id(job).parse().unwrap())
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(stored.spec.name, "create");
}

#[tokio::test]
async fn post_jobs_bad_field_is_400_naming_it() {
    let app = TestApp::new().await;
    let mut job = hourly("bad-cron");
    job["schedule"] = json!({"cron": "0 61 * * * *"});
    app.json(Method::POST, "/v1/jobs", &job)
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("schedule.cron");
    let mut job = hourly("unknown-field");
    job["target"]["zone"] = json!("dc1");
    app.json(Method::POST, "/v1/jobs", &job)
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("target.zone");
    let mut job = hourly("no-name");
    job.as_object_mut().unwrap().remove("name");
    app.json(Method::POST, "/v1/jobs", &job)
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("name");
}

#[tokio::test]
async fn post_jobs_schedule_that_never_fires_is_400() {
    let app = TestApp::new().await;
    let mut job = hourly("never");
    job["schedule"] = json!({"cron": "0 0 0 30 2 *"});
    app.json(Method::POST, "/v1/jobs", &job)
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("schedule.cron");
}

#[tokio::test]
async fn post_jobs_not_json_is_400_invalid_json() {
    let app = TestApp::new().await;
    app.raw(Method::POST, "/v1/jobs", "{not json")
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_json");
}

#[tokio::test]
async fn post_jobs_duplicate_name_is_409() {
    let app = TestApp::new().await;
    app.create(&hourly("twice")).await;
    app.json(Method::POST, "/v1/jobs", &hourly("twice"))
        .await
        .assert_error(StatusCode::CONFLICT, "duplicate_name")
        .assert_field("name");
}

#[tokio::test]
async fn post_jobs_payload_over_the_limit_is_413() {
    let app = TestApp::new().await;
    let mut job = hourly("big-payload");
    job["payload"] = json!("x".repeat(PAYLOAD_LIMIT + 1));
    app.json(Method::POST, "/v1/jobs", &job)
        .await
        .assert_error(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
        .assert_field("payload");
}

#[tokio::test]
async fn post_jobs_body_over_the_limit_is_413_and_closes() {
    let app = TestApp::new().await;
    let body = vec![b' '; PAYLOAD_LIMIT * 2 + 64 * 1024 + 1];
    let answer = app.raw(Method::POST, "/v1/jobs", body).await;
    answer.assert_error(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    assert_eq!(answer.headers[header::CONNECTION], "close");
}

#[tokio::test]
async fn post_jobs_non_json_content_type_is_415() {
    let app = TestApp::new().await;
    let request = request(Method::POST, "/v1/jobs")
        .header(header::CONTENT_TYPE, "text/plain")
        .header(header::CONTENT_LENGTH, "2")
        .body("{}".into())
        .unwrap();
    app.send(request)
        .await
        .assert_error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
        .assert_field("Content-Type");
}

#[tokio::test]
async fn get_jobs_pages_by_cursor_and_filters_by_app() {
    let app = TestApp::new().await;
    for name in ["a", "b", "c"] {
        app.create(&hourly(name)).await;
    }
    let mut other = hourly("elsewhere");
    other["app"] = json!("other-app");
    app.create(&other).await;
    let first = app.get("/v1/jobs?app=api-test&limit=2").await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.body["items"].as_array().unwrap().len(), 2);
    let next = first.body["next"].as_str().expect("a next cursor");
    let second = app
        .get(&format!("/v1/jobs?app=api-test&limit=2&cursor={next}"))
        .await;
    assert_eq!(second.body["items"].as_array().unwrap().len(), 1);
    assert_eq!(second.body["next"], serde_json::Value::Null);
    let only = app.get("/v1/jobs?app=other-app").await;
    let items = only.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["name"], "elsewhere");
}

#[tokio::test]
async fn get_jobs_bad_query_is_400_naming_the_parameter() {
    let app = TestApp::new().await;
    app.get("/v1/jobs?limit=0")
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("limit");
    app.get("/v1/jobs?cursor=nope")
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("cursor");
    app.get("/v1/jobs?app=no%20spaces")
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("app");
    app.get("/v1/jobs?limit=abc")
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field");
    app.get("/v1/jobs?colour=red")
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field");
}

#[tokio::test]
async fn get_job_by_id_and_unknown_or_malformed_id_is_404() {
    let app = TestApp::new().await;
    let job = app.create(&hourly("read")).await;
    let answer = app.get(&format!("/v1/jobs/{}", id(&job))).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.body, job);
    let missing = uuid::Uuid::now_v7();
    let answer = app.get(&format!("/v1/jobs/{missing}")).await;
    answer.assert_error(StatusCode::NOT_FOUND, "not_found");
    assert!(
        answer.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&missing.to_string()),
        "{}",
        answer.body
    );
    app.get("/v1/jobs/not-a-uuid")
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
}

#[tokio::test]
async fn patch_job_replaces_present_fields_and_keeps_the_rest() {
    let app = TestApp::new().await;
    let job = app.create(&hourly("patch")).await;
    let path = format!("/v1/jobs/{}", id(&job));
    let answer = app
        .json(
            Method::PATCH,
            &path,
            &json!({"payload": {"n": 2}, "max_attempts": 3}),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body["payload"], json!({"n": 2}));
    assert_eq!(answer.body["max_attempts"], 3);
    assert_eq!(answer.body["version"], 2);
    assert_eq!(answer.body["schedule"], job["schedule"]);
    // The schedule did not change, so the next fire did not move.
    assert_eq!(answer.body["next_fire_at"], job["next_fire_at"]);
    // A job read with GET can be sent back whole (read-only fields are ignored).
    let mut whole = answer.body.clone();
    whole["name"] = json!("patch-renamed");
    let answer = app.json(Method::PATCH, &path, &whole).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body["name"], "patch-renamed");
    assert_eq!(answer.body["version"], 3);
}

#[tokio::test]
async fn patch_job_named_version_that_is_stale_is_409() {
    let app = TestApp::new().await;
    let job = app.create(&hourly("stale")).await;
    let path = format!("/v1/jobs/{}", id(&job));
    let ok = app
        .json(Method::PATCH, &path, &json!({"version": 1, "payload": 2}))
        .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    app.json(Method::PATCH, &path, &json!({"version": 1, "payload": 3}))
        .await
        .assert_error(StatusCode::CONFLICT, "version_conflict")
        .assert_field("version");
    let stale = request(Method::PATCH, &path)
        .header(header::IF_MATCH, "\"1\"")
        .body(json!({"payload": 4}).to_string().into())
        .unwrap();
    app.send(stale)
        .await
        .assert_error(StatusCode::CONFLICT, "version_conflict");
    let current = request(Method::PATCH, &path)
        .header(header::IF_MATCH, "W/\"2\"")
        .body(json!({"payload": 5}).to_string().into())
        .unwrap();
    let answer = app.send(current).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body["payload"], 5);
}

#[tokio::test]
async fn patch_job_bad_input_is_400_naming_the_field() {
    let app = TestApp::new().await;
    let job = app.create(&hourly("patch-bad")).await;
    let path = format!("/v1/jobs/{}", id(&job));
    app.json(Method::PATCH, &path, &json!([1]))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("body");
    app.json(Method::PATCH, &path, &json!({"version": "one"}))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("version");
    let bad_tag = request(Method::PATCH, &path)
        .header(header::IF_MATCH, "\"latest\"")
        .body("{}".into())
        .unwrap();
    app.send(bad_tag)
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("If-Match");
    app.json(Method::PATCH, &path, &json!({"misfire": "sometimes"}))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("misfire");
    app.json(
        Method::PATCH,
        &path,
        &json!({"schedule": {"cron": "0 0 0 30 2 *"}}),
    )
    .await
    .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
    .assert_field("schedule.cron");
    app.raw(Method::PATCH, &path, "{")
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_json");
    // Nothing changed.
    let answer = app.get(&path).await;
    assert_eq!(answer.body["version"], 1);
}

#[tokio::test]
async fn patch_unknown_job_is_404() {
    let app = TestApp::new().await;
    app.json(
        Method::PATCH,
        &format!("/v1/jobs/{}", uuid::Uuid::now_v7()),
        &json!({"payload": 1}),
    )
    .await
    .assert_error(StatusCode::NOT_FOUND, "not_found");
}

#[tokio::test]
async fn delete_job_is_204_then_404() {
    let app = TestApp::new().await;
    let job = app.create(&hourly("delete")).await;
    let path = format!("/v1/jobs/{}", id(&job));
    let answer = app.call(Method::DELETE, &path).await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT);
    assert_eq!(answer.body, serde_json::Value::Null);
    app.get(&path)
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
    app.call(Method::DELETE, &path)
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
    app.call(Method::DELETE, "/v1/jobs/nope")
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
}

#[tokio::test]
async fn pause_and_resume_job_flip_paused_once() {
    let app = TestApp::new().await;
    let job = app.create(&hourly("pause")).await;
    let path = format!("/v1/jobs/{}", id(&job));
    let paused = app.call(Method::POST, &format!("{path}/pause")).await;
    assert_eq!(paused.status, StatusCode::OK, "{}", paused.body);
    assert_eq!(
        (&paused.body["paused"], &paused.body["version"]),
        (&json!(true), &json!(2))
    );
    // Pausing a paused job changes nothing.
    let again = app
        .json(Method::POST, &format!("{path}/pause"), &json!({}))
        .await;
    assert_eq!(again.body["version"], 2);
    let resumed = app.call(Method::POST, &format!("{path}/resume")).await;
    assert_eq!(resumed.status, StatusCode::OK, "{}", resumed.body);
    assert_eq!(
        (&resumed.body["paused"], &resumed.body["version"]),
        (&json!(false), &json!(3))
    );
}

#[tokio::test]
async fn pause_resume_trigger_with_arguments_are_400_and_do_nothing() {
    let app = TestApp::new().await;
    let job = app.create(&hourly("args")).await;
    let path = format!("/v1/jobs/{}", id(&job));
    for action in ["pause", "resume", "trigger"] {
        app.json(
            Method::POST,
            &format!("{path}/{action}"),
            &json!({"force": true}),
        )
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("force");
        app.raw(Method::POST, &format!("{path}/{action}"), "[")
            .await
            .assert_error(StatusCode::BAD_REQUEST, "invalid_json");
    }
    let answer = app.get(&path).await;
    assert_eq!(answer.body["version"], 1);
    let runs = app.get(&format!("{path}/runs")).await;
    assert_eq!(runs.body["items"], json!([]));
}

#[tokio::test]
async fn pause_resume_trigger_unknown_job_are_404() {
    let app = TestApp::new().await;
    let missing = uuid::Uuid::now_v7();
    for action in ["pause", "resume", "trigger"] {
        app.call(Method::POST, &format!("/v1/jobs/{missing}/{action}"))
            .await
            .assert_error(StatusCode::NOT_FOUND, "not_found");
    }
}

#[tokio::test]
async fn trigger_job_records_manual_runs_stamped_with_this_node() {
    let app = TestApp::new().await;
    let job = app.create(&hourly("trigger")).await;
    let path = format!("/v1/jobs/{}", id(&job));
    app.call(Method::POST, &format!("{path}/pause")).await;
    // Paused or not, a trigger fires.
    let answer = app.call(Method::POST, &format!("{path}/trigger")).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
    let run = &answer.body;
    assert_eq!(run["trigger"], "manual");
    assert_eq!(run["job_id"], job["id"]);
    assert_eq!(run["fired_by"], "api-test-node");
    assert_eq!(run["state"], "scheduled");
    assert_eq!(run["items"].as_array().unwrap().len(), 1);
    assert_eq!(run["fire_state"], "running");
    let stored = app
        .store
        .get_run(run["id"].as_str().unwrap().parse().unwrap())
        .await
        .unwrap()
        .expect("recorded");
    assert_eq!(stored.fired_by.as_deref(), Some("api-test-node"));
}

#[tokio::test]
async fn trigger_sharded_job_answers_the_first_item_with_the_whole_fire() {
    let app = TestApp::new().await;
    let mut job = hourly("sharded");
    job["target"] = json!({"group": "g-sharded", "mode": "sharded", "shards": 3});
    let job = app.create(&job).await;
    let answer = app
        .call(Method::POST, &format!("/v1/jobs/{}/trigger", id(&job)))
        .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
    assert_eq!(answer.body["shard"], 0);
    let items = answer.body["items"].as_array().unwrap();
    let shards: Vec<_> = items.iter().map(|item| item["shard"].clone()).collect();
    assert_eq!(shards, vec![json!(0), json!(1), json!(2)]);
}

#[tokio::test]
async fn trigger_zone_job_without_live_zones_is_503_and_records_nothing() {
    let app = TestApp::new().await;
    let mut job = hourly("zone");
    job["target"] = json!({"group": "g-zone", "mode": "zone"});
    let job = app.create(&job).await;
    let path = format!("/v1/jobs/{}", id(&job));
    let answer = app.call(Method::POST, &format!("{path}/trigger")).await;
    answer.assert_error(StatusCode::SERVICE_UNAVAILABLE, "unavailable");
    assert!(
        answer.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("g-zone"),
        "{}",
        answer.body
    );
    let runs = app.get(&format!("{path}/runs")).await;
    assert_eq!(runs.body["items"], json!([]));
}

#[tokio::test]
async fn overlap_buffer_one_is_taken_and_an_unknown_policy_lists_it() {
    let app = TestApp::new().await;
    let mut body = hourly("buffered");
    body["overlap"] = json!("buffer_one");
    let job = app.create(&body).await;
    assert_eq!(job["overlap"], "buffer_one");
    let path = format!("/v1/jobs/{}", id(&job));
    let back = app
        .json(Method::PATCH, &path, &json!({"overlap": "forbid"}))
        .await;
    assert_eq!(back.status, StatusCode::OK, "{}", back.body);
    assert_eq!(back.body["overlap"], "forbid");

    body["overlap"] = json!("buffer");
    let answer = app.json(Method::POST, "/v1/jobs", &body).await;
    answer
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("overlap");
    assert!(
        answer.body.to_string().contains("buffer_one"),
        "the error lists the policies: {}",
        answer.body
    );
}
