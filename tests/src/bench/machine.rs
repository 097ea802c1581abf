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
    let rabbitmq = crate::vhost::rabbitmqctl_output(&["version"])
        .map_or_else(|_| "unknown".into(), |v| v.trim().to_string());
    let wal_max = quorum_wal_limit();
    let postgres = postgres_version(postgres_url).await;
    let commit = command(&["git", "rev-parse", "--short", "HEAD"]);
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    json!({
        "summary": format!("{cpus} × {model}, {mem_gib:.0} GiB, Linux {kernel}, RabbitMQ {rabbitmq} (quorum WAL limit {wal_max}), {postgres}, commit {commit} ({profile} build)"),
        "cpu": model, "cpus": cpus, "memory_gib": mem_gib, "kernel": kernel,
        "rabbitmq": rabbitmq, "rabbitmq_wal_max_size_bytes": wal_max,
        "postgres": postgres, "commit": commit, "profile": profile,
    })
}

/// The broker's quorum-queue WAL limit (`raft.wal_max_size_bytes`, which decides how
/// often W2's windows hold a rollover), or `"default"` when the node does not say.
fn quorum_wal_limit() -> String {
    crate::vhost::rabbitmqctl_output(&["eval", "application:get_env(ra, wal_max_size_bytes)."])
        .ok()
        .and_then(|out| {
            out.trim()
                .strip_prefix("{ok,")?
                .strip_suffix('}')
                .map(str::to_string)
        })
        .unwrap_or_else(|| "default".into())
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
