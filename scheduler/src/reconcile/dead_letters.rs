//! Publishing the dead letters of runs given up: one confirmed message per run to the
//! dead-letter exchange, routed to its group's dead-letter queue, before the run is noted
//! as dead-lettered. A crash in between publishes it again (a duplicate dead letter is
//! harmless: a replay revives the run once).

use std::collections::HashSet;

use chrono::Utc;
use lapin::{
    BasicProperties,
    types::{AMQPValue, FieldTable, LongString},
};
use tracing::warn;

use chime_consumer::protocol::{
    DeadLetterMessage,
    dead_letter::{REASON_HEADER, RUN_HEADER},
    topology,
};

use crate::{
    broker::ConfirmedPublisher,
    store::{OverdueRun, Store, StoreError},
    telemetry,
};

/// The dead letter of a dead run.
pub(crate) fn dead_letter(item: &OverdueRun, node: &str) -> DeadLetterMessage {
    let run = &item.run;
    let mut message = DeadLetterMessage::new(
        item.job.task_message(run),
        run.error.clone().unwrap_or_else(|| "given up".into()),
        run.finished_at.unwrap_or_else(Utc::now),
        run.history.clone(),
    );
    message.node = Some(node.to_string());
    message
}

/// Publishes the dead letters of `dead` and notes each confirmed one; returns how many.
/// Stops at the first broker failure: the rest stay pending for the next pass.
pub(super) async fn publish(
    store: &dyn Store,
    publisher: &ConfirmedPublisher,
    node: &str,
    dead: Vec<OverdueRun>,
) -> Result<usize, StoreError> {
    let mut declared = HashSet::new();
    let mut refused = HashSet::new();
    let mut published = 0;
    for item in dead {
        let letter = dead_letter(&item, node);
        let group = letter.task.group.clone();
        if let Err(error) = topology::check_group(&group) {
            // No dead-letter queue can exist for it (a job written around the API's
            // checks): the run's error holds the reason; the other dead letters go on.
            warn!(%error, run_id = %item.run.id, "no dead-letter queue for this group; the dead letter is dropped");
            store.mark_dead_lettered(item.run.id).await?;
            continue;
        }
        if refused.contains(&group) {
            continue;
        }
        if declared.insert(group.clone())
            && let Err(error) = publisher.declare_group(&group).await
        {
            warn!(%error, %group, "cannot declare the dead-letter queue; dead letters wait");
            if crate::broker::is_refusal(&error) {
                // This group's queues are refused; the other groups' dead letters go on.
                refused.insert(group);
                continue;
            }
            return Ok(published);
        }
        let queue = topology::dead_letter_queue(&topology::group_queue(&group));
        let mut headers = FieldTable::default();
        headers.insert(
            REASON_HEADER.into(),
            AMQPValue::LongString(LongString::from(letter.reason.as_str())),
        );
        headers.insert(
            RUN_HEADER.into(),
            AMQPValue::LongString(LongString::from(item.run.id.to_string().as_str())),
        );
        let properties = BasicProperties::default()
            .with_content_type("application/json".into())
            .with_message_id(item.run.id.to_string().into())
            .with_timestamp(Utc::now().timestamp() as u64)
            .with_app_id(node.into())
            .with_headers(headers);
        if let Err(error) = publisher
            .publish(
                topology::DEAD_LETTER_EXCHANGE,
                &queue,
                &letter.to_vec(),
                properties,
            )
            .await
        {
            warn!(%error, run_id = %item.run.id, "dead letter not confirmed; will publish it again");
            return Ok(published);
        }
        store.mark_dead_lettered(item.run.id).await?;
        metrics::counter!(telemetry::DEAD_LETTERS_PUBLISHED).increment(1);
        published += 1;
    }
    Ok(published)
}
