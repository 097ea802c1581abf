//! Keeps lapin's own ERROR line for a failed queue existence check out of chimed's log.
//!
//! AMQP 0-9-1 has one way to ask whether a queue exists: a passive `queue.declare`,
//! which the broker answers for a missing queue by closing the channel with 404
//! NOT_FOUND. lapin logs every channel the broker closes with an error code as
//! `ERROR Channel closed`, before the error reaches the code that asked. chimed asks
//! on purpose (`/v1/dlq/...` for a queue that does not exist answers 404; `dlq ls`
//! skips a group whose queue is gone), so in normal operation that line is noise that
//! an operator would take for a failure. Only that exact case is dropped: a
//! `queue.declare` (AMQP class 50, method 10) answered by 404. Every other channel or
//! connection close lapin reports is logged as before.

use std::fmt;

use tracing::{
    Event, Level, Subscriber,
    field::{Field, Visit},
};
use tracing_subscriber::layer::{Context, Layer};

/// The target lapin logs channel closes under.
const LAPIN_CHANNEL: &str = "lapin::channel";

/// A layer that disables lapin's log event for a passive `queue.declare` answered by 404.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExistenceCheckFilter;

impl<S: Subscriber> Layer<S> for ExistenceCheckFilter {
    fn event_enabled(&self, event: &Event<'_>, _ctx: Context<'_, S>) -> bool {
        let metadata = event.metadata();
        if metadata.target() != LAPIN_CHANNEL
            || *metadata.level() != Level::ERROR
            || metadata.fields().field("method").is_none()
        {
            return true;
        }
        let mut method = MethodField::default();
        event.record(&mut method);
        !method.text.as_deref().is_some_and(is_missing_queue_answer)
    }
}

/// The `method` field of lapin's event: the broker's `channel.close`, as Debug text.
#[derive(Default)]
struct MethodField {
    text: Option<String>,
}

impl Visit for MethodField {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "method" {
            self.text = Some(format!("{value:?}"));
        }
    }
}

/// Whether `close` (a `channel.close` as lapin prints it) answers a `queue.declare`
/// with 404 NOT_FOUND.
fn is_missing_queue_answer(close: &str) -> bool {
    close.starts_with("Close {")
        && close.contains("reply_code: 404,")
        && close.ends_with("class_id: 50, method_id: 10 }")
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use lapin::protocol::channel::Close;
    use tracing_subscriber::{fmt::MakeWriter, prelude::*};

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    /// What lapin logs when the broker closes channel 1 with `close`, through the filter.
    fn logged(close: Close) -> String {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::registry()
            .with(ExistenceCheckFilter)
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(false)
                    .with_writer(captured.clone()),
            );
        tracing::subscriber::with_default(subscriber, || {
            // The same fields as lapin's event (lapin-4.12 src/channel.rs).
            tracing::error!(target: "lapin::channel", channel = %1, method = ?close,
                error = "AMQPError", "Channel closed");
        });
        String::from_utf8(captured.0.lock().unwrap().clone()).unwrap()
    }

    fn close(reply_code: u16, text: &str, class_id: u16, method_id: u16) -> Close {
        Close {
            reply_code,
            reply_text: text.into(),
            class_id,
            method_id,
        }
    }

    #[test]
    fn a_missing_queue_answer_to_a_passive_declare_is_not_logged() {
        let text = logged(close(
            404,
            "NOT_FOUND - no queue 'chime.group.x.dlq'",
            50,
            10,
        ));
        assert_eq!(text, "");
    }

    #[test]
    fn other_channel_errors_are_logged() {
        for (code, class_id, method_id, why) in [
            (404, 60, 40, "NOT_FOUND - no exchange 'chime.replies'"),
            (404, 50, 20, "NOT_FOUND - no exchange in queue.bind"),
            (
                406,
                50,
                10,
                "PRECONDITION_FAILED - inequivalent arg 'x-queue-type'",
            ),
            (403, 50, 10, "ACCESS_REFUSED - access to queue refused"),
        ] {
            let text = logged(close(code, why, class_id, method_id));
            assert!(
                text.contains("ERROR") && text.contains(why),
                "{code} {class_id}.{method_id}: {text:?}"
            );
        }
    }

    #[test]
    fn the_filter_reads_lapins_own_rendering() {
        // Guards the text match against a lapin upgrade that prints the method otherwise.
        let text = format!("{:?}", close(404, "NOT_FOUND", 50, 10));
        assert!(is_missing_queue_answer(&text), "{text}");
        assert!(!is_missing_queue_answer(&format!(
            "{:?}",
            close(404, "NOT_FOUND", 60, 40)
        )));
    }
}
