//! CPU per fire and per message (issue 42): what a fire costs the scheduler side
//! (`chimed`, plus PostgreSQL's backends when it is the store) in microseconds of CPU,
//! and what a message costs the broker in its ceiling step, so that each W1/W2 window can
//! be compared with the broker's own cost in the same run.

use std::collections::BTreeMap;

use serde::Serialize;

/// Microseconds of CPU per fire in one window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FireCost {
    /// `chimed`'s own CPU per fire.
    pub chimed_us: f64,
    /// PostgreSQL's backends' CPU per fire (0 on SQLite, which runs inside `chimed`).
    pub database_us: f64,
    /// The two together: the scheduler side's cost of a fire.
    pub scheduler_us: f64,
    /// The broker's CPU per fire in the same window (publishing, delivering and the
    /// replies of each task).
    pub broker_us: f64,
}

/// The cost per fire of a window of `elapsed_s` seconds in which `fires` fires went out:
/// `chimed_cpu_s` from `chimed`'s own counters, the rest from the window's share of
/// each program (`MachineCpu::since`: percent of one core).
pub fn per_fire(
    chimed_cpu_s: f64,
    by_program: &BTreeMap<&'static str, f64>,
    elapsed_s: f64,
    fires: usize,
) -> Option<FireCost> {
    if fires == 0 {
        return None;
    }
    let fires = fires as f64;
    let of = |program: &str| by_program.get(program).copied().unwrap_or(0.0) / 100.0 * elapsed_s;
    let chimed_us = chimed_cpu_s * 1e6 / fires;
    let database_us = of("postgresql") * 1e6 / fires;
    Some(FireCost {
        chimed_us: round2(chimed_us),
        database_us: round2(database_us),
        scheduler_us: round2(chimed_us + database_us),
        broker_us: round2(of("rabbitmq") * 1e6 / fires),
    })
}

/// The broker's CPU per message, in microseconds, in a ceiling step that moved
/// `messages` messages in `elapsed_s` seconds.
pub fn broker_per_message(
    by_program: &BTreeMap<&'static str, f64>,
    elapsed_s: f64,
    messages: usize,
) -> Option<f64> {
    (messages > 0).then(|| {
        let busy_s = by_program.get("rabbitmq").copied().unwrap_or(0.0) / 100.0 * elapsed_s;
        round2(busy_s * 1e6 / messages as f64)
    })
}

/// The scheduler side's cost of a fire over the broker's cost of a ceiling message (the
/// target: at most 0.5).
pub fn scheduler_vs_broker(
    fire: Option<FireCost>,
    broker_per_message_us: Option<f64>,
) -> Option<f64> {
    match (fire, broker_per_message_us) {
        (Some(fire), Some(broker)) if broker > 0.0 => Some(round2(fire.scheduler_us / broker)),
        _ => None,
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn programs(chimed: f64, postgres: f64, rabbitmq: f64) -> BTreeMap<&'static str, f64> {
        BTreeMap::from([
            ("chimed", chimed),
            ("postgresql", postgres),
            ("rabbitmq", rabbitmq),
        ])
    }

    #[test]
    fn a_fire_costs_chimed_plus_its_database() {
        // 20 s at 1 000 fires/s: 5 s of chimed, 10 % of a core of PostgreSQL, 65 % of RabbitMQ.
        let cost = per_fire(5.0, &programs(25.0, 10.0, 65.0), 20.0, 20_000).unwrap();
        assert_eq!(cost.chimed_us, 250.0);
        assert_eq!(cost.database_us, 100.0);
        assert_eq!(cost.scheduler_us, 350.0);
        assert_eq!(cost.broker_us, 650.0);
    }

    #[test]
    fn sqlite_has_no_database_process() {
        let mut by_program = programs(30.0, 0.0, 60.0);
        by_program.remove("postgresql");
        let cost = per_fire(6.0, &by_program, 20.0, 20_000).unwrap();
        assert_eq!(cost.database_us, 0.0);
        assert_eq!(cost.scheduler_us, cost.chimed_us);
    }

    #[test]
    fn the_ratio_compares_with_the_broker_ceiling() {
        // The ceiling moved 100 000 messages in 5 s at 80 % of a core: 40 µs each.
        let broker = broker_per_message(&programs(0.0, 0.0, 80.0), 5.0, 100_000);
        assert_eq!(broker, Some(40.0));
        let fire = per_fire(1.0, &programs(0.0, 0.0, 0.0), 10.0, 100_000);
        assert_eq!(scheduler_vs_broker(fire, broker), Some(0.25));
        assert_eq!(scheduler_vs_broker(None, broker), None);
        assert_eq!(per_fire(1.0, &programs(0.0, 0.0, 0.0), 10.0, 0), None);
        assert_eq!(broker_per_message(&programs(0.0, 0.0, 80.0), 5.0, 0), None);
    }
}
