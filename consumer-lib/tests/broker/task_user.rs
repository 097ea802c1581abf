//! `scheduler_user`: a consumer runs only tasks whose validated `user_id` is the
//! scheduler's; a task published by another RabbitMQ user (or without `user_id`) is
//! dead-lettered unrun.

use chime_consumer::{Consumer, protocol::topology};
use chime_testkit::vhost::TestUser;
use lapin::{BasicProperties, Channel, options::BasicPublishOptions};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::support::*;

/// Publishes `task` to `group` with `user_id`, and waits for a clean confirm.
async fn publish_as(
    channel: &Channel,
    group: &str,
    task: &chime_consumer::TaskMessage,
    user_id: Option<&str>,
) {
    let mut properties = BasicProperties::default().with_delivery_mode(2);
    if let Some(user) = user_id {
        properties = properties.with_user_id(user.into());
    }
    let confirm = channel
        .basic_publish(
            topology::TASK_EXCHANGE.into(),
            group.into(),
            BasicPublishOptions {
                mandatory: true,
                ..BasicPublishOptions::default()
            },
            &task.to_vec(),
            properties,
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    assert!(confirm.is_ack(), "broker nacked the task");
    assert!(confirm.take_message().is_none(), "task not routed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_published_by_another_user_is_not_run() {
    let vhost = fresh_vhost();
    let mut scheduler = TestUser::new("chime-sched");
    let mut intruder = TestUser::new("chime-intruder");
    scheduler.grant(&vhost, "^$", "^chime\\.tasks$", "^$");
    intruder.grant(&vhost, "^$", "^chime\\.tasks$", "^$");
    let group = format!("authn-{}", Uuid::now_v7().simple());
    let (connection, channel) = vhost.channel().await;
    topology::declare_group(&connection, &channel, &group)
        .await
        .expect("declare the group");
    let queue = topology::group_queue(&group);

    let forged = task("shop", "work", &group);
    let unsigned = task("shop", "work", &group);
    let genuine = task("shop", "work", &group);
    let (intruder_connection, intruder_channel) = intruder.channel().await;
    publish_as(&intruder_channel, &group, &forged, Some(intruder.name())).await;
    // guest publishes without user_id.
    publish_as(&channel, &group, &unsigned, None).await;
    let (scheduler_connection, scheduler_channel) = scheduler.channel().await;
    publish_as(&scheduler_channel, &group, &genuine, Some(scheduler.name())).await;

    let (seen, mut ran) = mpsc::unbounded_channel();
    let running = Running::consumer(
        Consumer::builder(vhost.amqp_url(), &group)
            .scheduler_user(scheduler.name())
            .handler("work", recording(seen)),
    );
    let ctx = receive("the scheduler's task to run", &mut ran).await;
    assert_eq!(ctx.task_id(), genuine.task_id);
    let dlq = topology::dead_letter_queue(&queue);
    eventually("both refused tasks dead-lettered", || async {
        (vhost.ready_and_unacked(&dlq) == (2, 0)).then_some(())
    })
    .await;
    eventually("the work queue drained", || async {
        (vhost.ready_and_unacked(&queue) == (0, 0)).then_some(())
    })
    .await;
    running.stop().await;
    assert!(ran.try_recv().is_err(), "only the scheduler's task ran");
    for connection in [connection, intruder_connection, scheduler_connection] {
        let _ = connection.close(200, "done".into()).await;
    }
}
