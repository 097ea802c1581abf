//! Authenticated messages (`reply_users`): on a private vhost with two RabbitMQ users,
//! app B's user cannot settle app A's run or speak for A's group; what it sends is
//! dead-lettered with reason `user`, counted, and changes nothing, while A's own replies
//! apply.

use std::time::Duration;

use chime_consumer::protocol::{dead_letter::REJECT_REASON_HEADER, topology};
use chime_tests::{TestConsumer, api::metric, vhost::TestUser, wait};
use lapin::{
    BasicProperties, Channel,
    options::{BasicGetOptions, BasicPublishOptions},
    types::AMQPValue,
};
use reqwest::Method;
use serde_json::json;

use crate::support::{Setup, StoreKind};

const DLQ: &str = "chime.replies.dlq";

/// Publishes `body` to the reply exchange with `user_id` (if any) and waits for the
/// confirm; panics unless the broker acked it and it reached a queue.
async fn reply_as(channel: &Channel, user_id: Option<&str>, body: &serde_json::Value) {
    let mut properties = BasicProperties::default().with_delivery_mode(2);
    if let Some(user) = user_id {
        properties = properties.with_user_id(user.into());
    }
    let confirm = channel
        .basic_publish(
            topology::REPLY_EXCHANGE.into(),
            topology::REPLY_ROUTING_KEY.into(),
            BasicPublishOptions {
                mandatory: true,
                ..BasicPublishOptions::default()
            },
            body.to_string().as_bytes(),
            properties,
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    assert!(confirm.is_ack(), "broker nacked the reply");
    assert!(confirm.take_message().is_none(), "reply not routed");
}

/// The body, reason and publisher (`x-chime-published-by`) of each message in the reply
/// DLQ (taking them).
async fn dead_letter_reasons(
    s: &Setup,
    expected: usize,
) -> Vec<(serde_json::Value, String, Option<String>)> {
    wait::until(
        "the refused replies in the DLQ",
        Duration::from_secs(30),
        || async { (s.vhost.queue_state(DLQ).await.0 as usize >= expected).then_some(()) },
    )
    .await;
    let (connection, channel) = s.vhost.channel().await;
    let mut reasons = Vec::new();
    while let Some(message) = channel
        .basic_get(DLQ.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
    {
        let body = serde_json::from_slice(&message.delivery.data).expect("a reply's JSON");
        let headers = message
            .delivery
            .properties
            .headers()
            .clone()
            .unwrap_or_default();
        let reason = match headers.inner().get(REJECT_REASON_HEADER) {
            Some(AMQPValue::LongString(reason)) => reason.to_string(),
            other => panic!("no reason header: {other:?}"),
        };
        let published_by = match headers.inner().get("x-chime-published-by") {
            Some(AMQPValue::LongString(user)) => Some(user.to_string()),
            _ => None,
        };
        assert_eq!(
            message.delivery.properties.user_id(),
            &None,
            "chimed's dead letter carries no user_id"
        );
        reasons.push((body, reason, published_by));
    }
    let _ = connection.close(200, "done".into()).await;
    reasons
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_apps_user_cannot_settle_a_run_and_is_refused_and_counted() {
    let mut app_a = TestUser::new("chime-app-a");
    let mut app_b = TestUser::new("chime-app-b");
    let rule = format!("ga={},gb={}", app_a.name(), app_b.name());
    let s = Setup::with_env(StoreKind::Sqlite, &[("CHIME_REPLY_USERS", &rule)]).await;
    let write_replies = format!("^{}$", topology::REPLY_EXCHANGE.replace('.', "\\."));
    app_a.grant(&s.vhost, "^$", &write_replies, "^$");
    app_b.grant(&s.vhost, "^$", &write_replies, "^$");

    let job = s
        .chimed
        .api
        .create_job(json!({
            "app": "a", "name": "nightly",
            "schedule": {"every": "1h"},
            "target": {"group": "ga"},
        }))
        .await;
    let run = s.chimed.api.trigger(job["id"].as_str().unwrap()).await;
    let run_id = run["id"].as_str().unwrap().to_string();
    s.chimed
        .api
        .wait_run(&run_id, "the run to be dispatched", |r| {
            r["state"] == "dispatched"
        })
        .await;

    let success = |consumer: &str| {
        json!({"v": 1, "type": "result", "task_id": run_id, "attempt": 1,
            "consumer": consumer, "finished_at": "2026-11-21T10:00:00.000Z",
            "status": "succeeded", "output": {"forged": consumer == "b-1"}})
    };
    // App B forges a success for A's run, and speaks for A's group.
    let (b_connection, b_channel) = app_b.channel().await;
    reply_as(&b_channel, Some(app_b.name()), &success("b-1")).await;
    let presence = json!({"v": 1, "type": "presence", "instance": "b-1", "group": "ga",
        "broadcast": false, "at": "2026-11-21T10:00:00.000Z"});
    reply_as(&b_channel, Some(app_b.name()), &presence).await;
    // A reply without user_id is refused too (guest is listed for nothing).
    let (guest_connection, guest_channel) = s.vhost.channel().await;
    reply_as(&guest_channel, None, &success("b-1")).await;

    let reasons = dead_letter_reasons(&s, 3).await;
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert_eq!(reasons[0].0, success("b-1"), "the refused reply as sent");
    assert!(
        reasons[0].1.contains(&format!(
            "{:?} may not answer for group \"ga\"",
            app_b.name()
        )),
        "{reasons:?}"
    );
    assert!(reasons[1].1.contains("may not answer"), "{reasons:?}");
    assert!(reasons[2].1.contains("no user_id"), "{reasons:?}");
    assert_eq!(reasons[0].2.as_deref(), Some(app_b.name()), "{reasons:?}");
    assert_eq!(reasons[2].2, None, "{reasons:?}");
    let metrics = s.chimed.api.metrics().await;
    assert_eq!(
        metric(&metrics, r#"chime_rejected_replies_total{reason="user"}"#),
        3.0,
        "{metrics}"
    );

    // The run is untouched: still dispatched, nothing noted on it.
    let (_, unaffected) = s
        .chimed
        .api
        .call(Method::GET, &format!("/v1/runs/{run_id}"), None)
        .await;
    assert_eq!(unaffected["state"], "dispatched", "{unaffected}");
    assert!(unaffected["consumer"].is_null(), "{unaffected}");
    assert!(
        !unaffected["history"]
            .as_array()
            .expect("history")
            .iter()
            .any(|r| r["event"] == "reply_rejected"),
        "{unaffected}"
    );

    // A's own success applies.
    let (a_connection, a_channel) = app_a.channel().await;
    reply_as(&a_channel, Some(app_a.name()), &success("a-1")).await;
    let done = s
        .chimed
        .api
        .wait_run(&run_id, "A's success to apply", |r| {
            r["state"] == "succeeded"
        })
        .await;
    assert_eq!(done["consumer"], "a-1", "{done}");
    assert_eq!(done["output"], json!({"forged": false}), "{done}");

    for connection in [a_connection, b_connection, guest_connection] {
        let _ = connection.close(200, "done".into()).await;
    }
    drop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apps_own_consumer_settles_its_runs_under_reply_users() {
    let mut app_a = TestUser::new("chime-app-a");
    let rule = format!("ga={}", app_a.name());
    let s = Setup::with_env(StoreKind::Sqlite, &[("CHIME_REPLY_USERS", &rule)]).await;
    app_a.grant(&s.vhost, ".*", ".*", ".*");
    // The library stamps every reply with its connection's user.
    let consumer = TestConsumer::start(&app_a.amqp_url(), "ga", "a-1", &[]).await;
    let job = s
        .chimed
        .api
        .create_job(json!({
            "app": "a", "name": "own",
            "schedule": {"every": "1h"},
            "target": {"group": "ga"},
        }))
        .await;
    let run = s.chimed.api.trigger(job["id"].as_str().unwrap()).await;
    let run_id = run["id"].as_str().unwrap().to_string();
    let done = s
        .chimed
        .api
        .wait_run(&run_id, "the app's consumer to settle it", |r| {
            r["state"] == "succeeded"
        })
        .await;
    assert_eq!(done["consumer"], "a-1", "{done}");
    let metrics = s.chimed.api.metrics().await;
    assert_eq!(
        metric(&metrics, r#"chime_rejected_replies_total{reason="user"}"#),
        0.0,
        "presence and replies of the app's own user are accepted: {metrics}"
    );
    consumer.kill().await;
}

/// Users the permissions script made for one test, deleted on drop.
struct ScriptUsers(Vec<String>);

impl Drop for ScriptUsers {
    fn drop(&mut self) {
        for user in &self.0 {
            let _ = chime_tests::vhost::rabbitmqctl_output(&["delete_user", user]);
        }
    }
}

/// Whether `result` is the broker refusing access (403).
fn refused<T: std::fmt::Debug>(result: Result<T, lapin::Error>) -> bool {
    match result {
        Err(error) => error.to_string().contains("ACCESS_REFUSED"),
        Ok(value) => panic!("the broker allowed it: {value:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_permissions_script_confines_each_app_to_its_groups_and_topics() {
    let vhost = chime_tests::TestVhost::new();
    let id = uuid::Uuid::now_v7().simple().to_string();
    let (sched, user_a, user_b) = (
        format!("chime-sched-{id}"),
        format!("chime-a-{id}"),
        format!("chime-b-{id}"),
    );
    let _users = ScriptUsers(vec![sched.clone(), user_a.clone(), user_b.clone()]);
    let passwords = chime_tests::binaries::scratch_dir("rabbitmq-passwords");
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/rabbitmq/permissions.sh");
    let output = std::process::Command::new("bash")
        .arg(&script)
        .args(["--vhost", vhost.name(), "--scheduler", &sched])
        .args(["--app", &format!("{user_a}:shop:ga")])
        .args(["--app", &format!("{user_b}:billing:gb")])
        .arg("--password-dir")
        .arg(&passwords)
        .output()
        .expect("run permissions.sh");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains(&format!("CHIME_REPLY_USERS=ga={user_a},gb={user_b}")),
        "{stdout}"
    );
    let url = |user: &str| {
        let password = std::fs::read_to_string(passwords.join(user)).expect("password file");
        assert!(!stdout.contains(password.trim()), "no password is printed");
        format!(
            "amqp://{user}:{}@{}/{}",
            password.trim(),
            std::env::var("CHIME_TEST_AMQP_ADDR").unwrap_or_else(|_| "127.0.0.1:5672".into()),
            vhost.name()
        )
    };
    let connect = |url: String| async move {
        lapin::Connection::connect(&url, lapin::ConnectionProperties::default())
            .await
            .expect("connect")
    };

    // The scheduler declares the topology.
    let scheduler = connect(url(&sched)).await;
    let channel = scheduler.create_channel().await.expect("channel");
    topology::declare_replies(&scheduler, &channel)
        .await
        .expect("replies");
    for group in ["ga", "gb"] {
        topology::declare_group(&scheduler, &channel, group)
            .await
            .expect("the scheduler declares every group");
    }

    // App A's consumer declares what it uses, and may publish replies...
    let app_a = connect(url(&user_a)).await;
    let channel = app_a.create_channel().await.expect("channel");
    channel
        .confirm_select(lapin::options::ConfirmSelectOptions::default())
        .await
        .expect("confirm mode");
    topology::declare_replies(&app_a, &channel)
        .await
        .expect("replies");
    topology::declare_group(&app_a, &channel, "ga")
        .await
        .expect("its own group");
    reply_as(&channel, Some(&user_a), &json!({"v": 1})).await;
    // ...and its observers bind to its own tasks only.
    topology::declare_observer(&app_a, &channel, "shop-audit", &["shop.*".to_string()])
        .await
        .expect("an observer of its own app");
    let other = app_a.create_channel().await.expect("channel");
    assert!(refused(
        topology::declare_observer(&app_a, &other, "shop-spy", &["billing.*".to_string()]).await
    ));
    // Another app's group, tasks and queues are out of reach.
    let other = app_a.create_channel().await.expect("channel");
    assert!(refused(topology::declare_group(&app_a, &other, "gb").await));
    let other = app_a.create_channel().await.expect("channel");
    assert!(refused(
        other
            .basic_get(
                topology::group_queue("gb").as_str().into(),
                lapin::options::BasicGetOptions::default()
            )
            .await
    ));
    let other = app_a.create_channel().await.expect("channel");
    let published = other
        .basic_publish(
            topology::TASK_EXCHANGE.into(),
            "gb".into(),
            BasicPublishOptions::default(),
            b"{}",
            BasicProperties::default(),
        )
        .await;
    // A refused publish closes the channel asynchronously: the next call sees it.
    let _ = published;
    let after = other
        .basic_get(
            topology::group_queue("ga").as_str().into(),
            lapin::options::BasicGetOptions::default(),
        )
        .await;
    assert!(after.is_err(), "publishing a task closed the channel");
    for connection in [scheduler, app_a] {
        let _ = connection.close(200, "done".into()).await;
    }
    let _ = std::fs::remove_dir_all(&passwords);
}
