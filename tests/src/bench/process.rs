//! CPU time and memory of a process under measurement, and where the whole machine's CPU
//! went during a workload, read from `/proc` (Linux).

use std::collections::BTreeMap;

use serde::Serialize;

/// A reading of one process.
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct ProcessSample {
    /// User + system CPU seconds since the process started.
    pub cpu_s: f64,
    /// Resident set size now, MiB.
    pub rss_mib: f64,
    /// Peak resident set size, MiB.
    pub peak_rss_mib: f64,
}

/// Clock ticks per second of `/proc/<pid>/stat` (USER_HZ, 100 on every Linux we run on).
const TICKS_PER_S: f64 = 100.0;

/// The command name and CPU seconds of `/proc/<pid>/stat`, if the process exists.
fn command_and_cpu(pid: u32) -> Option<(String, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name sits in parentheses and may hold spaces; fields follow it.
    let (head, after) = stat.rsplit_once(')')?;
    let command = head.split_once('(').map_or("", |(_, c)| c).to_string();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15, i.e. 11 and 12 after the name.
    Some((command, (ticks(11) + ticks(12)) / TICKS_PER_S))
}

impl ProcessSample {
    /// Reads `pid`; zeros when the process is gone.
    pub fn read(pid: u32) -> Self {
        let cpu_s = command_and_cpu(pid).map_or(0.0, |(_, cpu)| cpu);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        Self {
            cpu_s,
            rss_mib: kib("VmRSS:") / 1024.0,
            peak_rss_mib: kib("VmHWM:") / 1024.0,
        }
    }
}

/// CPU seconds used so far by each program sharing the machine, and the machine's own
/// busy, idle and stolen time (a virtual machine's neighbours show up as steal).
#[derive(Debug, Clone, Default)]
pub struct MachineCpu {
    by_program: BTreeMap<&'static str, f64>,
    machine: BTreeMap<&'static str, f64>,
}

impl MachineCpu {
    /// Reads every process and `/proc/stat` now.
    pub fn read() -> Self {
        let me = std::process::id();
        let mut by_program = BTreeMap::new();
        let pids = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok());
        for pid in pids {
            let Some((command, cpu)) = command_and_cpu(pid) else {
                continue;
            };
            *by_program.entry(program(pid == me, &command)).or_default() += cpu;
        }
        Self {
            by_program,
            machine: machine_times(),
        }
    }

    /// Percent of one core each program used between `earlier` and this reading, plus
    /// the machine's `busy`, `idle` and `steal` percent of all its cores.
    pub fn since(&self, earlier: &Self, elapsed_s: f64) -> BTreeMap<&'static str, f64> {
        let elapsed_s = elapsed_s.max(1e-3);
        let mut out: BTreeMap<&'static str, f64> = self
            .by_program
            .iter()
            .map(|(name, cpu)| {
                let before = earlier.by_program.get(name).copied().unwrap_or(0.0);
                (*name, round1(100.0 * (cpu - before).max(0.0) / elapsed_s))
            })
            .collect();
        let delta = |key| {
            self.machine.get(key).copied().unwrap_or(0.0)
                - earlier.machine.get(key).copied().unwrap_or(0.0)
        };
        let total = delta("total").max(1e-9);
        for key in ["busy", "idle", "steal"] {
            out.insert(key, round1(100.0 * delta(key) / total));
        }
        out
    }
}

/// Which program a process belongs to, for [`MachineCpu`].
fn program(is_me: bool, command: &str) -> &'static str {
    match command {
        _ if is_me => "bench",
        "chimed" => "chimed",
        "beam.smp" | "erl_child_setup" | "epmd" => "rabbitmq",
        "postgres" => "postgresql",
        _ => "other",
    }
}

/// Total, busy, idle and steal ticks of all cores from `/proc/stat`'s `cpu` line.
fn machine_times() -> BTreeMap<&'static str, f64> {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let at = |i: usize| ticks.get(i).copied().unwrap_or(0.0);
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let total: f64 = (0..8).map(at).sum();
    let idle = at(3) + at(4);
    BTreeMap::from([
        ("total", total),
        ("idle", idle),
        ("steal", at(7)),
        ("busy", total - idle - at(7)),
    ])
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let sample = ProcessSample::read(std::process::id());
        assert!(sample.rss_mib > 0.0 && sample.peak_rss_mib >= sample.rss_mib);
    }

    #[test]
    fn machine_cpu_accounts_for_this_process_and_the_whole_machine() {
        let before = MachineCpu::read();
        let spin = std::time::Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(300) {
            std::hint::black_box(spin.elapsed());
        }
        let shares = MachineCpu::read().since(&before, 0.3);
        assert!(shares["bench"] > 10.0, "{shares:?}");
        let machine = shares["busy"] + shares["idle"] + shares["steal"];
        assert!((99.0..=101.0).contains(&machine), "{shares:?}");
    }
}
