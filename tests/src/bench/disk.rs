//! Storage stalls: stretches of time in which a block device had requests in flight and
//! completed none of them. A quorum queue delivers a message only after its log entry is
//! on disk, so while the disk stalls every delivery waits, the broker alone's as well as
//! Chime's. W2 reports the stalls inside each measured window beside its lateness, so a
//! p99 decided by the disk can be told from one decided by Chime.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use serde::Serialize;

/// How often the block devices' counters are read.
const SAMPLE_EVERY: Duration = Duration::from_millis(5);
/// Shorter stretches without a completed request are ordinary queueing, not stalls.
pub const STALL_MS: f64 = 50.0;

/// The stalls seen in one window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct DiskStalls {
    /// Stretches of at least [`STALL_MS`] with requests in flight and none completed.
    pub stalls: usize,
    /// The longest of them, ms (0 when there were none).
    pub longest_ms: f64,
    /// Their total length, ms.
    pub stalled_ms: f64,
}

impl std::fmt::Display for DiskStalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "disk stalls >= {STALL_MS} ms: {} (longest {:.0} ms)",
            self.stalls, self.longest_ms
        )
    }
}

/// One device's counters, as `/proc/diskstats` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DeviceSample {
    /// Reads, writes, discards and flushes completed so far.
    completed: u64,
    /// Requests issued and not yet completed.
    in_flight: u64,
}

/// Parses `/proc/diskstats`, skipping devices that are not disks (loop, ram, zram).
fn parse_diskstats(text: &str) -> HashMap<String, DeviceSample> {
    let mut devices = HashMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let Some(name) = fields.get(2) else { continue };
        if ["loop", "ram", "zram"].iter().any(|p| name.starts_with(p)) {
            continue;
        }
        let field = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
        // Columns after the name: reads completed (3), writes completed (7), in flight
        // (11), discards completed (14, kernel 4.18+), flushes completed (18, 5.5+).
        let (Some(reads), Some(writes), Some(in_flight)) = (field(3), field(7), field(11)) else {
            continue;
        };
        let completed = reads + writes + field(14).unwrap_or(0) + field(18).unwrap_or(0);
        devices.insert(
            name.to_string(),
            DeviceSample {
                completed,
                in_flight,
            },
        );
    }
    devices
}

/// Whether some device held requests through the step from `before` to `after` without
/// completing any.
fn stalled(before: &HashMap<String, DeviceSample>, after: &HashMap<String, DeviceSample>) -> bool {
    after.iter().any(|(name, now)| {
        before.get(name).is_some_and(|then| {
            then.in_flight > 0 && now.in_flight > 0 && now.completed == then.completed
        })
    })
}

/// Folds a sequence of (time, stalled) steps into [`DiskStalls`].
#[derive(Debug, Default)]
struct StallCounter {
    open_since: Option<Instant>,
    result: DiskStalls,
}

impl StallCounter {
    /// Records the step between two samples, `began` being the first: a stall lasts from
    /// the start of its first stalled step to the start of the first step that is not.
    fn step(&mut self, began: Instant, stalled: bool) {
        match (stalled, self.open_since) {
            (true, None) => self.open_since = Some(began),
            (false, Some(_)) => self.close(began),
            _ => {}
        }
    }

    fn close(&mut self, at: Instant) {
        if let Some(since) = self.open_since.take() {
            let ms = at.duration_since(since).as_secs_f64() * 1000.0;
            if ms >= STALL_MS {
                self.result.stalls += 1;
                self.result.longest_ms = self.result.longest_ms.max(ms);
                self.result.stalled_ms += ms;
            }
        }
    }

    fn finish(mut self, at: Instant) -> DiskStalls {
        self.close(at);
        self.result
    }
}

/// Watches the block devices from [`DiskWatch::start`] until [`DiskWatch::finish`], on a
/// thread of its own so that a busy runtime cannot hide a stall.
pub struct DiskWatch {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<DiskStalls>>,
}

impl DiskWatch {
    /// Starts watching; a machine without `/proc/diskstats` reports no stalls.
    pub fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || watch(&stop))
        };
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops watching and returns the stalls seen.
    pub fn finish(mut self) -> DiskStalls {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|thread| thread.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for DiskWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn watch(stop: &AtomicBool) -> DiskStalls {
    let read = || std::fs::read_to_string("/proc/diskstats").map(|text| parse_diskstats(&text));
    let mut counter = StallCounter::default();
    let Ok(mut before) = read() else {
        return DiskStalls::default();
    };
    let mut before_at = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(SAMPLE_EVERY);
        let Ok(after) = read() else { break };
        let at = Instant::now();
        counter.step(before_at, stalled(&before, &after));
        (before, before_at) = (after, at);
    }
    counter.finish(Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: &str = "\
 254       0 vda 48731 7300 3431514 23947 1118586 88865 14602160 140350 0 58144 180678 11262 50 1181952 1211 424420 15169
   7       0 loop0 10 0 20 1 0 0 0 0 1 0 1
";

    #[test]
    fn diskstats_count_every_kind_of_completed_request_and_skip_loop_devices() {
        let devices = parse_diskstats(IDLE);
        assert_eq!(devices.len(), 1);
        let vda = devices["vda"];
        assert_eq!(vda.completed, 48731 + 1118586 + 11262 + 424420);
        assert_eq!(vda.in_flight, 0);
    }

    fn sample(completed: u64, in_flight: u64) -> HashMap<String, DeviceSample> {
        HashMap::from([(
            "vda".to_string(),
            DeviceSample {
                completed,
                in_flight,
            },
        )])
    }

    #[test]
    fn a_device_holding_requests_without_completing_any_is_stalled() {
        assert!(stalled(&sample(10, 2), &sample(10, 2)));
        assert!(!stalled(&sample(10, 2), &sample(11, 2)), "it completed one");
        assert!(
            !stalled(&sample(10, 0), &sample(10, 0)),
            "it had nothing to do"
        );
        assert!(
            !stalled(&sample(10, 0), &sample(10, 1)),
            "the request just arrived"
        );
    }

    #[test]
    fn only_stretches_of_the_stall_length_count() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut counter = StallCounter::default();
        // 0–30 ms stalled: too short.
        counter.step(at(0), true);
        counter.step(at(10), true);
        counter.step(at(30), false);
        // 40–240 ms stalled.
        counter.step(at(35), false);
        counter.step(at(40), true);
        counter.step(at(100), true);
        counter.step(at(240), false);
        // 300 ms until the end (360 ms) stalled.
        counter.step(at(300), true);
        let stalls = counter.finish(at(360));
        assert_eq!(stalls.stalls, 2);
        assert!((stalls.longest_ms - 200.0).abs() < 1e-6, "{stalls:?}");
        assert!((stalls.stalled_ms - 260.0).abs() < 1e-6, "{stalls:?}");
    }
}
