//! A description of the machine and the software a bench ran on, for the report.

use serde_json::{Value, json};

/// CPU model and count, memory, kernel, RabbitMQ and PostgreSQL versions, commit.
pub async fn describe(postgres_url: &str) -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_gib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    let kernel = command(&["uname", "-r"]);
    let rabbitmq = command(&[
        &std::env::var("CHIME_RABBITMQCTL").unwrap_or_else(|_| "rabbitmqctl".into()),
        "version",
    ]);
    let postgres = postgres_version(postgres_url).await;
    let commit = command(&["git", "rev-parse", "--short", "HEAD"]);
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    json!({
        "summary": format!("{cpus} × {model}, {mem_gib:.0} GiB, Linux {kernel}, RabbitMQ {rabbitmq}, {postgres}, commit {commit} ({profile} build)"),
        "cpu": model, "cpus": cpus, "memory_gib": mem_gib, "kernel": kernel,
        "rabbitmq": rabbitmq, "postgres": postgres, "commit": commit, "profile": profile,
    })
}

fn command(args: &[&str]) -> String {
    std::process::Command::new(args[0])
        .args(&args[1..])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

async fn postgres_version(url: &str) -> String {
    use sqlx::Connection;
    match sqlx::PgConnection::connect(url).await {
        Ok(mut conn) => sqlx::query_scalar::<_, String>("SHOW server_version")
            .fetch_one(&mut conn)
            .await
            .map_or_else(|_| "PostgreSQL ?".into(), |v| format!("PostgreSQL {v}")),
        Err(_) => "PostgreSQL unreachable".into(),
    }
}
