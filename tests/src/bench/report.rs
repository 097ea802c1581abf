//! The results of a bench run: the machine, each workload's numbers with their ratio to
//! the ceiling measured in the same run, and each target as met or missed. Printed as a
//! table and written as JSON for comparison across commits.

use serde::Serialize;
use serde_json::{Map, Value};

/// What one workload measured on one backend.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// `W1` … `W5`.
    pub workload: &'static str,
    /// `postgres` or `sqlite`.
    pub backend: &'static str,
    /// Its size (jobs, rate, duration).
    pub params: Value,
    /// Every number it measured, by name.
    pub metrics: Map<String, Value>,
    /// The targets, each met or missed.
    pub checks: Vec<Check>,
    /// Correctness failures (lost or duplicated fires): these fail the run.
    pub errors: Vec<String>,
}

/// One target.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// The target, e.g. `consumed within 1.3x the ceiling`.
    pub target: String,
    /// What was measured, formatted.
    pub measured: String,
    /// Whether the target was met.
    pub met: bool,
    /// A correctness invariant (nothing lost or duplicated), judged at every scale; the
    /// other targets are about speed and mean nothing at smoke scale.
    pub correctness: bool,
}

impl Outcome {
    /// An outcome to fill in.
    pub fn new(workload: &'static str, backend: &'static str, params: Value) -> Self {
        Self {
            workload,
            backend,
            params,
            metrics: Map::new(),
            checks: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// Records a number (anything serializable).
    pub fn metric(&mut self, name: &str, value: impl Serialize) {
        self.metrics.insert(
            name.to_string(),
            serde_json::to_value(value).unwrap_or(Value::Null),
        );
    }

    /// Records a target.
    pub fn check(&mut self, target: impl Into<String>, measured: impl Into<String>, met: bool) {
        self.checks.push(Check {
            target: target.into(),
            measured: measured.into(),
            met,
            correctness: false,
        });
    }

    /// Records a correctness invariant; a broken one fails the run.
    pub fn require(&mut self, what: &str, count: usize) {
        self.metric(what, count);
        if count > 0 {
            self.errors.push(format!("{what}: {count}"));
        }
        self.check(format!("{what} = 0"), count.to_string(), count == 0);
        if let Some(check) = self.checks.last_mut() {
            check.correctness = true;
        }
    }
}

/// A whole run.
#[derive(Debug, Serialize)]
pub struct Report {
    /// `smoke`, `default` or `full`.
    pub scale: String,
    /// The machine and the software measured.
    pub machine: Value,
    /// Every outcome, in order.
    pub outcomes: Vec<Outcome>,
}

impl Report {
    /// Human-readable: one block per outcome. At smoke scale the speed targets are shown
    /// as not judged: the sizes are too small for their verdicts to mean anything.
    pub fn render(&self) -> String {
        let smoke = self.scale == "smoke";
        let mut out = String::new();
        out.push_str(&format!(
            "chime-bench ({} scale) on {}\n",
            self.scale,
            self.machine["summary"].as_str().unwrap_or("?")
        ));
        if smoke {
            out.push_str(
                "smoke scale proves the harness runs: speed targets are not judged at this size \
                 ([not judged]); correctness checks are\n",
            );
        }
        for o in &self.outcomes {
            out.push_str(&format!("\n{} {} {}\n", o.workload, o.backend, o.params));
            for (name, value) in &o.metrics {
                out.push_str(&format!("  {name:<34} {}\n", compact(value)));
            }
            for c in &o.checks {
                let mark = match (smoke && !c.correctness, c.met) {
                    (true, _) => "not judged",
                    (false, true) => "met",
                    (false, false) => "MISS",
                };
                out.push_str(&format!(
                    "  {:<12} {:<44} {}\n",
                    format!("[{mark}]"),
                    c.target,
                    c.measured
                ));
            }
            for e in &o.errors {
                out.push_str(&format!("  ERROR {e}\n"));
            }
        }
        out
    }

    /// Whether a correctness invariant broke anywhere.
    pub fn has_errors(&self) -> bool {
        self.outcomes.iter().any(|o| !o.errors.is_empty())
    }
}

fn compact(value: &Value) -> String {
    match value {
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{f:.3}"),
            _ => n.to_string(),
        },
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={}", compact(v)))
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn report(scale: &str) -> Report {
        let mut outcome = Outcome::new("W1", "sqlite", json!({"jobs": 100}));
        outcome.check("consumed within 1.3x the ceiling", "1.90x", false);
        outcome.check("p99 within 10 ms", "2.0 ms", true);
        outcome.require("duplicated fires", 0);
        Report {
            scale: scale.into(),
            machine: json!({"summary": "test box"}),
            outcomes: vec![outcome],
        }
    }

    #[test]
    fn smoke_scale_judges_only_correctness() {
        let text = report("smoke").render();
        assert!(!text.contains("MISS"), "{text}");
        let verdicts: Vec<&str> = text
            .lines()
            .filter(|l| l.trim_start().starts_with('['))
            .collect();
        assert_eq!(verdicts.len(), 3, "{text}");
        assert!(verdicts[0].contains("[not judged]") && verdicts[0].contains("1.3x"));
        assert!(verdicts[1].contains("[not judged]") && verdicts[1].contains("p99"));
        assert!(
            verdicts[2].contains("[met]") && verdicts[2].contains("duplicated fires = 0"),
            "correctness is judged at every scale: {text}"
        );
        let mut broken = report("smoke");
        broken.outcomes[0].require("lost fires", 2);
        assert!(
            broken.render().contains("[MISS]"),
            "a broken invariant shows"
        );
    }

    #[test]
    fn other_scales_give_verdicts() {
        let text = report("default").render();
        assert!(text.contains("[MISS]") && text.contains("[met]"), "{text}");
        assert!(!text.contains("not judged"), "{text}");
    }
}
