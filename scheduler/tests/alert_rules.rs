//! `deploy/prometheus/chime-alerts.yml` against what `chimed` emits and what the
//! operations guide says: every metric a rule uses is declared in `telemetry.rs` and
//! listed in the metrics tables of docs/operations.md or docs/architecture.md, every
//! rule carries its annotations, and its runbook link points at a section of
//! docs/operations.md named after the alert.
//!
//! `promtool` (Debian's `prometheus` package; `deploy/local/test.sh` installs it) checks
//! the rule file, every query of the Grafana dashboard (`deploy/grafana/dashboards/
//! chime.json`, with Grafana's variables replaced) and the Compose stack's
//! `prometheus.yml`. Without promtool those tests fail, saying how to get it. That every
//! metric they name is exported by a running chimed is checked end to end
//! (`tests/tests/e2e/dashboards.rs`).

use std::{collections::BTreeSet, path::Path, process::Command};

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
    let architecture = read("../docs/architecture.md");
    let rules = rules();
    assert!(rules.len() >= 14, "rules found: {}", rules.len());
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
                operations.contains(&format!("| `{name}` |"))
                    || architecture.contains(&format!("| `{name}` |")),
                "{} uses {name}, which the metrics tables of docs/operations.md and \
                 docs/architecture.md do not list",
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

/// Runs `promtool ARGS` in the repository root and returns its output; fails when
/// promtool is missing or reports a problem.
fn promtool(args: &[&str]) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let output = Command::new("promtool")
        .args(args)
        .current_dir(&root)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run promtool ({e}): install Debian's `prometheus` package \
                 (deploy/local/test.sh does) or put promtool on PATH"
            )
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "promtool {} failed:\n{text}",
        args.join(" ")
    );
    text
}

#[test]
fn promtool_accepts_the_alert_rules() {
    let out = promtool(&["check", "rules", "deploy/prometheus/chime-alerts.yml"]);
    let count = rules().len();
    assert!(
        out.contains(&format!("SUCCESS: {count} rules found")),
        "promtool did not find the {count} rules:\n{out}"
    );
}

#[test]
fn promtool_accepts_the_compose_prometheus_config() {
    // --syntax-only: the CA and token files exist only inside the Compose stack.
    promtool(&[
        "check",
        "config",
        "--syntax-only",
        "deploy/prometheus/prometheus.yml",
    ]);
    let config = read("../deploy/prometheus/prometheus.yml");
    assert!(
        config.contains("/etc/prometheus/chime-alerts.yml"),
        "{config}"
    );
    assert!(config.contains("scheme: https"), "{config}");
    assert!(config.contains("credentials_file:"), "{config}");
}

/// Every `expr` of the dashboard's panels.
fn dashboard_exprs(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => dashboard_exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| dashboard_exprs(v, out)),
        _ => {}
    }
}

#[test]
fn every_dashboard_query_is_valid_promql() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("../deploy/grafana/dashboards/chime.json"))
            .expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    dashboard_exprs(&dashboard, &mut exprs);
    assert!(exprs.len() >= 20, "queries found: {}", exprs.len());
    // Each query as a recording rule, Grafana's variables replaced by what they become.
    let mut file = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, expr) in exprs.iter().enumerate() {
        let expr = expr
            .replace("$__rate_interval", "1m")
            .replace("$instance", ".*");
        assert!(!expr.contains('$'), "an unknown variable in {expr}");
        let quoted = serde_json::to_string(&expr).expect("a JSON string");
        file.push_str(&format!(
            "      - record: chime_dashboard:query{i}\n        expr: {quoted}\n"
        ));
    }
    let path = std::env::temp_dir().join(format!(
        "chime-dashboard-queries-{}.yml",
        std::process::id()
    ));
    std::fs::write(&path, file).expect("write the rule file");
    let out = promtool(&["check", "rules", path.to_str().expect("a UTF-8 path")]);
    let _ = std::fs::remove_file(&path);
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", exprs.len())),
        "{out}"
    );
}

#[test]
fn the_dashboard_asks_for_its_prometheus_and_covers_the_issue() {
    let text = read("../deploy/grafana/dashboards/chime.json");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("variables");
    assert!(
        variables
            .iter()
            .any(|v| v["type"] == "datasource" && v["query"] == "prometheus"),
        "no Prometheus data source variable"
    );
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    for panel in panels {
        assert!(
            ids.insert(panel["id"].as_u64().expect("an id")),
            "duplicate id"
        );
        if panel["type"] != "row" {
            assert_eq!(panel["datasource"]["uid"], "${datasource}", "{panel}");
        }
    }
    let names = metric_names(&text);
    for needed in [
        "chime_fires_total",
        "chime_fire_lateness_seconds",
        "chime_results_total",
        "chime_retries_total",
        "chime_dead_runs_total",
        "chime_dlq_depth",
        "chime_republishes_total",
        "chime_shards_owned",
        "chime_shard_takeovers_total",
        "chime_store_errors_total",
        "chime_broker_connects_total",
        "chime_group_consumers",
    ] {
        assert!(
            names.contains(needed),
            "the dashboard does not show {needed}"
        );
    }
    let provider = read("../deploy/grafana/provisioning/dashboards/chime.yml");
    let compose = read("../deploy/compose/docker-compose.yml");
    assert!(
        compose.contains("../grafana/dashboards:/var/lib/grafana/dashboards/chime:ro")
            && provider.contains("path: /var/lib/grafana/dashboards/chime"),
        "the dashboard provider does not read where compose mounts the dashboards"
    );
}
