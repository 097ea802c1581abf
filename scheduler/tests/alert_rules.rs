//! `deploy/prometheus/chime-alerts.yml` against what `chimed` emits and what the
//! operations guide says: every metric a rule uses is declared in `telemetry.rs` and
//! listed in docs/operations.md, every rule carries its annotations, and its runbook
//! link points at a section of docs/operations.md named after the alert. (promtool is
//! not assumed to be installed; the file is read line by line, as Prometheus' rule
//! format is regular enough for that.)

use std::{collections::BTreeSet, path::Path};

use chime_scheduler::domain::behind::MisfireCause;

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One alerting rule: its name and the text of its lines.
struct Rule {
    name: String,
    body: String,
}

fn rules() -> Vec<Rule> {
    let text = read("../deploy/prometheus/chime-alerts.yml");
    let mut rules: Vec<Rule> = Vec::new();
    for line in text.lines() {
        if let Some(name) = line.trim().strip_prefix("- alert:") {
            rules.push(Rule {
                name: name.trim().to_string(),
                body: String::new(),
            });
        } else if let Some(rule) = rules.last_mut() {
            rule.body.push_str(line);
            rule.body.push('\n');
        }
    }
    rules
}

/// The `chime_*` metric names in `text`, histogram series mapped to their histogram.
fn metric_names(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("chime_"))
        .map(|word| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| word.strip_suffix(suffix))
                .unwrap_or(word)
                .to_string()
        })
        .collect()
}

fn expr(rule: &Rule) -> &str {
    rule.body
        .lines()
        .find_map(|line| line.trim().strip_prefix("expr:"))
        .unwrap_or_else(|| panic!("{} has no expr", rule.name))
}

#[test]
fn every_metric_a_rule_uses_is_emitted_and_documented() {
    let telemetry = read("src/telemetry.rs");
    let operations = read("../docs/operations.md");
    let rules = rules();
    assert!(rules.len() >= 7, "rules found: {}", rules.len());
    for rule in &rules {
        let names = metric_names(expr(rule));
        assert!(!names.is_empty(), "{} uses no chime metric", rule.name);
        for name in names {
            assert!(
                telemetry.contains(&format!("\"{name}\"")),
                "{} uses {name}, which telemetry.rs does not declare",
                rule.name
            );
            assert!(
                operations.contains(&format!("| `{name}` |")),
                "{} uses {name}, which the metrics tables of docs/operations.md do not list",
                rule.name
            );
        }
    }
}

#[test]
fn every_rule_has_its_annotations_and_a_runbook_section() {
    let operations = read("../docs/operations.md");
    for rule in rules() {
        for key in ["summary:", "description:", "runbook:", "severity:"] {
            assert!(rule.body.contains(key), "{} lacks {key}", rule.name);
        }
        let anchor = format!("docs/operations.md#{}", rule.name.to_lowercase());
        assert!(
            rule.body.contains(&anchor),
            "{}'s runbook is not {anchor}",
            rule.name
        );
        assert!(
            operations.contains(&format!("\n### {}\n", rule.name)),
            "docs/operations.md has no section ### {}",
            rule.name
        );
    }
}

#[test]
fn falling_behind_alerts_on_the_behind_cause_only() {
    let rules = rules();
    let rule = rules
        .iter()
        .find(|rule| rule.name == "ChimeFallingBehind")
        .expect("a ChimeFallingBehind rule");
    let expr = expr(rule);
    assert!(
        expr.contains(&format!("cause=\"{}\"", MisfireCause::Behind.as_str())),
        "{expr}"
    );
    assert!(!expr.contains(MisfireCause::Outage.as_str()), "{expr}");
    assert!(
        metric_names(expr).contains("chime_timer_misfires_total"),
        "{expr}"
    );
}
