//! CPU time and memory of a process under measurement, read from `/proc` (Linux).

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

impl ProcessSample {
    /// Reads `pid`; zeros when the process is gone.
    pub fn read(pid: u32) -> Self {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Fields after the command name (which may hold spaces) start at field 3.
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        // utime and stime are fields 14 and 15, i.e. 11 and 12 after the name.
        let cpu_s = (ticks(11) + ticks(12)) / TICKS_PER_S;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let sample = ProcessSample::read(std::process::id());
        assert!(sample.rss_mib > 0.0 && sample.peak_rss_mib >= sample.rss_mib);
    }
}
