//! Exponential backoff with jitter for reconnect loops, used by consumers and by `chimed`.

use std::time::Duration;

/// Doubles the delay after each failure, from `initial` up to `max`, and adds up to 25 %
/// jitter so a fleet of clients does not reconnect in lock-step.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
    attempts: u32,
}

impl Backoff {
    /// A backoff starting at `initial` and capped at `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            next: initial,
            attempts: 0,
        }
    }

    /// The delay before the next attempt; each call doubles the following one.
    pub fn next_delay(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(self.max);
        self.attempts += 1;
        base + jitter(base / 4)
    }

    /// Failures since the last [`Backoff::reset`].
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Starts over after a success.
    pub fn reset(&mut self) {
        self.next = self.initial;
        self.attempts = 0;
    }
}

impl Default for Backoff {
    /// 100 ms doubling up to 10 s.
    fn default() -> Self {
        Self::new(Duration::from_millis(100), Duration::from_secs(10))
    }
}

fn jitter(up_to: Duration) -> Duration {
    let nanos = up_to.as_nanos() as u64;
    if nanos == 0 {
        return Duration::ZERO;
    }
    // Sub-second clock noise is random enough to spread reconnects.
    let noise = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0);
    Duration::from_nanos(noise % nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_with_bounded_jitter_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(400));
        let delays: Vec<_> = (0..4).map(|_| b.next_delay()).collect();
        for (delay, base) in delays.iter().zip([100u64, 200, 400, 400]) {
            let base = Duration::from_millis(base);
            assert!(
                *delay >= base && *delay <= base + base / 4,
                "{delay:?} vs {base:?}"
            );
        }
        assert_eq!(b.attempts(), 4);
        b.reset();
        assert!(b.next_delay() < Duration::from_millis(126));
    }
}
