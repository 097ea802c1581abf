//! Authenticated messages (`reply_users`): on a private vhost with two RabbitMQ users,
//! app B's user cannot settle app A's run or speak for A's group; what it sends is
//! dead-lettered with reason `user`, counted, and changes nothing, while A's own replies
//! apply.

use std::time::Duration;

use chime_consumer::protocol::{dead_letter::REJECT_REASON_HEADER, topology};
use chime_tests::{TestConsumer, api::metric, vhost::TestUser, wait};
use lapin::{
    BasicProperties, Channel,
    options::{
        BasicGetOptions, BasicPublishOptions, ExchangeDeclareOptions, ExchangeDeleteOptions,
        QueueBindOptions, QueueDeleteOptions, QueuePurgeOptions,
    },
    types::{AMQPValue, FieldTable},
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
        .args(["--app", &format!("{user_a}:shop:ga:broadcast:observe")])
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

    // App A's consumer finds what chimed declared (it may configure none of it), and may
    // publish replies...
    let app_a = connect(url(&user_a)).await;
    topology::declare_or_find(&app_a, topology::Shared::Replies)
        .await
        .expect("replies");
    topology::declare_or_find(&app_a, topology::Shared::Group("ga"))
        .await
        .expect("its own group");
    let channel = app_a.create_channel().await.expect("channel");
    channel
        .confirm_select(lapin::options::ConfirmSelectOptions::default())
        .await
        .expect("confirm mode");
    reply_as(&channel, Some(&user_a), &json!({"v": 1})).await;
    channel
        .basic_get(
            topology::group_queue("ga").as_str().into(),
            BasicGetOptions::default(),
        )
        .await
        .expect("it consumes its group's queue");
    // ...declares its broadcast queues, and its observers bind to its own tasks only.
    topology::declare_instance_queue(&app_a, &channel, "ga", "a-1")
        .await
        .expect("a broadcast queue of its group");
    topology::declare_observer(&app_a, &channel, "shop-audit", &["shop.*".to_string()])
        .await
        .expect("an observer of its own app");
    let other = app_a.create_channel().await.expect("channel");
    assert!(refused(
        topology::declare_observer(&app_a, &other, "shop-spy", &["billing.*".to_string()]).await
    ));
    // Another app's group, tasks and queues are out of reach.
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

    // App B, with no broadcast or observer rights, uses its group but can neither touch
    // the shared topology nor route anyone else's messages to itself.
    let app_b = connect(url(&user_b)).await;
    topology::declare_or_find(&app_b, topology::Shared::Replies)
        .await
        .expect("replies");
    topology::declare_or_find(&app_b, topology::Shared::Group("gb"))
        .await
        .expect("its own group");
    assert!(
        refused(topology::declare_or_find(&app_b, topology::Shared::Group("gnew")).await),
        "a group chimed has not declared yet cannot be made by an app"
    );
    let fresh = || async { app_b.create_channel().await.expect("channel") };
    let no_options = FieldTable::default;
    assert!(refused(
        fresh()
            .await
            .queue_delete(topology::REPLY_QUEUE.into(), QueueDeleteOptions::default())
            .await
    ));
    assert!(refused(
        fresh()
            .await
            .queue_purge(topology::REPLY_QUEUE.into(), QueuePurgeOptions::default())
            .await
    ));
    assert!(refused(
        fresh()
            .await
            .basic_get(topology::REPLY_QUEUE.into(), BasicGetOptions::default())
            .await
    ));
    assert!(refused(
        fresh()
            .await
            .exchange_delete(
                topology::TASK_EXCHANGE.into(),
                ExchangeDeleteOptions::default()
            )
            .await
    ));
    assert!(refused(
        fresh()
            .await
            .exchange_declare(
                topology::TASK_EXCHANGE.into(),
                lapin::ExchangeKind::Direct,
                ExchangeDeclareOptions {
                    durable: true,
                    ..ExchangeDeclareOptions::default()
                },
                no_options(),
            )
            .await
    ));
    for (exchange, key) in [
        (topology::TASK_EXCHANGE, "ga".to_string()),
        (
            topology::DEAD_LETTER_EXCHANGE,
            topology::dead_letter_queue(&topology::group_queue("ga")),
        ),
        (topology::BROADCAST_EXCHANGE, "ga".to_string()),
    ] {
        assert!(
            refused(
                fresh()
                    .await
                    .queue_bind(
                        topology::group_queue("gb").as_str().into(),
                        exchange.into(),
                        key.as_str().into(),
                        QueueBindOptions::default(),
                        no_options(),
                    )
                    .await
            ),
            "binding its queue to {exchange} with {key}"
        );
    }
    assert!(refused(
        topology::declare_instance_queue(&app_b, &fresh().await, "gb", "b-1").await
    ));
    assert!(refused(
        topology::declare_observer(&app_b, &fresh().await, "billing", &["billing.*".into()]).await
    ));
    let channel = fresh().await;
    let _ = channel
        .basic_publish(
            topology::DEAD_LETTER_EXCHANGE.into(),
            topology::dead_letter_queue(&topology::group_queue("ga"))
                .as_str()
                .into(),
            BasicPublishOptions::default(),
            b"{}",
            BasicProperties::default(),
        )
        .await;
    assert!(
        channel
            .basic_get(
                topology::group_queue("gb").as_str().into(),
                BasicGetOptions::default()
            )
            .await
            .is_err(),
        "publishing a dead letter closed the channel"
    );
    for connection in [scheduler, app_a, app_b] {
        let _ = connection.close(200, "done".into()).await;
    }
    let _ = std::fs::remove_dir_all(&passwords);
}

/// Takes one task from `queue` as the vhost's admin user and settles it with `reject`:
/// requeued (`true`) or dead-lettered by the broker (`false`). Returns its body.
async fn take_task(s: &Setup, queue: &str, requeue: bool) -> Vec<u8> {
    let (connection, channel) = s.vhost.channel().await;
    let message = wait::until("a task in the group queue", Duration::from_secs(30), || {
        let channel = channel.clone();
        async move {
            channel
                .basic_get(queue.into(), BasicGetOptions::default())
                .await
                .expect("basic.get")
        }
    })
    .await;
    let body = message.delivery.data.clone();
    message
        .delivery
        .reject(lapin::options::BasicRejectOptions { requeue })
        .await
        .expect("reject");
    let _ = connection.close(200, "done".into()).await;
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_notice_another_user_forged_marks_no_run_dead() {
    let mut app_b = TestUser::new("chime-app-b");
    let rule = format!("gb={}", app_b.name());
    let s = Setup::with_env(StoreKind::Sqlite, &[("CHIME_REPLY_USERS", &rule)]).await;
    // The right an app needs to declare queues that dead-letter into chime.dlx.
    app_b.grant(&s.vhost, "^$", r"^chime\.dlx$", "^$");
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
    let group_queue = topology::group_queue("ga");
    let task = take_task(&s, &group_queue, true).await;

    // App B publishes A's task into A's dead letters, as if the broker had dead-lettered it.
    let (b_connection, b_channel) = app_b.channel().await;
    b_channel
        .confirm_select(lapin::options::ConfirmSelectOptions::default())
        .await
        .expect("confirm mode");
    let confirm = b_channel
        .basic_publish(
            topology::DEAD_LETTER_EXCHANGE.into(),
            topology::dead_letter_queue(&group_queue).as_str().into(),
            BasicPublishOptions::default(),
            &task,
            BasicProperties::default().with_user_id(app_b.name().into()),
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    assert!(confirm.is_ack());
    let forged = format!(
        r#"chime_dead_lettered_total{{queue="{}",reason="unauthenticated"}}"#,
        topology::dead_letter_queue(&group_queue)
    );
    wait::until(
        "the forged notice to be counted",
        Duration::from_secs(30),
        || async { (metric(&s.chimed.api.metrics().await, &forged) >= 1.0).then_some(()) },
    )
    .await;
    let (_, unaffected) = s
        .chimed
        .api
        .call(Method::GET, &format!("/v1/runs/{run_id}"), None)
        .await;
    assert_ne!(unaffected["state"], "dead", "{unaffected}");
    assert!(
        s.chimed
            .log()
            .contains("ignoring a dead-letter notice chimed did not publish"),
        "the WARN names it"
    );

    // The broker dead-lettering chimed's own task (user_id kept) still marks the run dead.
    take_task(&s, &group_queue, false).await;
    let dead = s
        .chimed
        .api
        .wait_run(&run_id, "the run to be marked dead", |r| {
            r["state"] == "dead"
        })
        .await;
    assert!(
        dead["error"]
            .as_str()
            .unwrap_or_default()
            .contains("dead-lettered by RabbitMQ"),
        "{dead}"
    );
    let _ = b_connection.close(200, "done".into()).await;
    drop(s);
}
