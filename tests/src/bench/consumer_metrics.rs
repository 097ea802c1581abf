//! The measured consumer's own metrics. `chime-bench` installs a recorder for its process,
//! so a workload can report what the consumer library did, such as how many deliveries
//! each ack frame settled.

use std::sync::OnceLock;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use serde::Serialize;

static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();

/// Records this process's metrics from now on (once; later calls do nothing).
pub fn install() -> anyhow::Result<()> {
    if SNAPSHOTTER.get().is_some() {
        return Ok(());
    }
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .map_err(|e| anyhow::anyhow!("cannot install the metrics recorder: {e}"))?;
    let _ = SNAPSHOTTER.set(snapshotter);
    Ok(())
}

/// Delivery ack frames the consumer library sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct AckFrames {
    /// `basic.ack` with `multiple`.
    pub multiple: u64,
    /// `basic.ack` for one delivery.
    pub single: u64,
}

impl AckFrames {
    /// Deliveries settled per frame, for `deliveries` acked.
    pub fn deliveries_per_frame(&self, deliveries: usize) -> Option<f64> {
        let frames = self.multiple + self.single;
        (frames > 0).then(|| deliveries as f64 / frames as f64)
    }
}

/// The ack frames sent since the last call (the recorder hands counters out and resets
/// them), or `None` when no recorder is installed.
pub fn ack_frames_since_last() -> Option<AckFrames> {
    let snapshot = SNAPSHOTTER.get()?.snapshot();
    let mut frames = AckFrames::default();
    for (key, _, _, value) in snapshot.into_vec() {
        let key = key.key();
        let DebugValue::Counter(count) = value else {
            continue;
        };
        if key.name() != "chime_consumer_delivery_acks_total" {
            continue;
        }
        match key
            .labels()
            .find(|l| l.key() == "multiple")
            .map(|l| l.value())
        {
            Some("true") => frames.multiple += count,
            _ => frames.single += count,
        }
    }
    Some(frames)
}

/// Deliveries the consumer library answered from its idempotency store instead of
/// running the handler (`chime_consumer_replayed_total`: a task id it had already run,
/// delivered again) since the last snapshot, or `None` when no recorder is installed.
/// Snapshots hand counters out and reset them, so this resets the ack frame counts too.
pub fn replayed_since_last() -> Option<u64> {
    let snapshot = SNAPSHOTTER.get()?.snapshot();
    Some(
        snapshot
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == "chime_consumer_replayed_total")
            .filter_map(|(.., value)| match value {
                DebugValue::Counter(count) => Some(count),
                _ => None,
            })
            .sum(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliveries_per_frame_counts_both_kinds() {
        let frames = AckFrames {
            multiple: 3,
            single: 2,
        };
        assert_eq!(frames.deliveries_per_frame(100), Some(20.0));
        assert_eq!(AckFrames::default().deliveries_per_frame(100), None);
    }
}
