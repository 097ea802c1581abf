//! Unit tests of the configuration layers.

use super::*;

fn no_env(_: &str) -> Option<String> {
    None
}

#[test]
fn defaults_match_the_public_surface() {
    let config = Layers::new().env(no_env).build().unwrap();
    assert_eq!(config, Config::default());
    assert_eq!(config.database_url, "sqlite://chime.db");
    assert_eq!(config.amqp_url, "amqp://guest:guest@127.0.0.1:5672/%2f");
    assert_eq!(config.http_addr, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(config.payload_limit, 256 * 1024);
    assert_eq!(config.http, HttpSettings::default());
    assert_eq!(config.http.header_timeout, Duration::from_secs(10));
    assert_eq!(config.http.max_connections, 1024);
    assert_eq!(config.misfire_grace, Duration::from_secs(5));
    assert_eq!(config.fire_ahead, Duration::from_secs(2));
    assert_eq!(config.observer_copies, ObserverCopies::Registered);
    assert_eq!(config.shard_count, 256);
    assert_eq!(config.worker_threads, None);
    assert_eq!(config.worker_threads(2), 1);
    assert_eq!(config.worker_threads(1), 1);
    assert_eq!(config.worker_threads(8), 4);
    assert_eq!(config.cluster, ClusterSettings::default());
    assert_eq!(
        config.run_retention,
        Some(Duration::from_secs(7 * 24 * 3600))
    );
}

#[test]
fn takeover_ack_wait_is_off_or_at_most_two_seconds() {
    let with = |value: &'static str| {
        Layers::new()
            .env(move |var| (var == "CHIME_TAKEOVER_ACK_WAIT").then(|| value.to_string()))
            .build()
    };
    assert_eq!(
        Layers::new().build().unwrap().takeover_ack_wait,
        Duration::from_millis(500)
    );
    assert_eq!(with("0s").unwrap().takeover_ack_wait, Duration::ZERO);
    assert_eq!(
        with("2s").unwrap().takeover_ack_wait,
        Duration::from_secs(2)
    );
    let err = with("2001ms").unwrap_err().to_string();
    assert!(err.contains("use 0s to 2s"), "{err}");
}

#[test]
fn run_retention_is_off_or_at_least_an_hour() {
    let with = |value: &'static str| {
        Layers::new()
            .env(move |var| (var == "CHIME_RUN_RETENTION").then(|| value.to_string()))
            .build()
    };
    assert_eq!(with("0s").unwrap().run_retention, None);
    assert_eq!(
        with("30d").unwrap().run_retention,
        Some(Duration::from_secs(30 * 24 * 3600))
    );
    let err = with("10m").unwrap_err().to_string();
    assert!(
        err.contains("use 0s (keep forever) or at least 1h"),
        "{err}"
    );
}

#[test]
fn consumer_retention_defaults_to_a_day_and_is_at_least_a_minute() {
    let with = |value: &'static str| {
        Layers::new()
            .env(move |var| (var == "CHIME_CONSUMER_RETENTION").then(|| value.to_string()))
            .build()
    };
    assert_eq!(
        Layers::new().build().unwrap().consumer_retention,
        Duration::from_secs(24 * 3600)
    );
    assert_eq!(
        with("2h").unwrap().consumer_retention,
        Duration::from_secs(7200)
    );
    let err = with("30s").unwrap_err().to_string();
    assert!(err.contains("use at least 1m"), "{err}");
}

#[test]
fn lease_timing_must_leave_room_to_renew() {
    let env = |var: &str| match var {
        "CHIME_LEASE_TTL" => Some("3s".to_string()),
        "CHIME_LEASE_RENEW_INTERVAL" => Some("2s".to_string()),
        _ => None,
    };
    let err = Layers::new().env(env).build().unwrap_err().to_string();
    assert!(err.contains("at most a third of lease_ttl"), "{err}");
    let env = |var: &str| match var {
        "CHIME_LEASE_TTL" => Some("3s".to_string()),
        "CHIME_LEASE_RENEW_INTERVAL" => Some("1s".to_string()),
        "CHIME_HEARTBEAT_INTERVAL" => Some("1s".to_string()),
        _ => None,
    };
    let config = Layers::new().env(env).build().unwrap();
    assert_eq!(config.cluster.lease_ttl, Duration::from_secs(3));
}

#[test]
fn flags_override_env_override_file() {
    let mut layers = Layers::new();
    layers
        .apply_toml(
            "http_addr = \"0.0.0.0:1\"\ndatabase_url = \"sqlite://file.db\"\npayload_limit = 2048",
            "chime.toml",
        )
        .unwrap();
    let env = |var: &str| match var {
        "CHIME_HTTP_ADDR" => Some("0.0.0.0:2".to_string()),
        "CHIME_LOOKAHEAD" => Some("1m".to_string()),
        _ => None,
    };
    let config = layers
        .env(env)
        .flag("http_addr", Some("0.0.0.0:3"))
        .build()
        .unwrap();
    assert_eq!(config.http_addr.port(), 3);
    assert_eq!(config.database_url, "sqlite://file.db");
    assert_eq!(config.lookahead, Duration::from_secs(60));
    assert_eq!(config.payload_limit, 2048);
}

#[test]
fn unknown_keys_get_a_suggestion() {
    let err = Layers::new()
        .apply_toml("databse_url = \"x\"", "c.toml")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown config key \"databse_url\" in c.toml (did you mean \"database_url\"?)"
    );
}

#[test]
fn invalid_values_name_key_and_source() {
    let env = |var: &str| (var == "CHIME_MISFIRE_GRACE").then(|| "soon".to_string());
    let err = Layers::new().env(env).build().unwrap_err().to_string();
    assert!(
        err.starts_with("invalid misfire_grace \"soon\" (from environment CHIME_MISFIRE_GRACE)"),
        "{err}"
    );
    let err = Layers::new()
        .flag("payload_limit", Some("1B"))
        .build()
        .unwrap_err()
        .to_string();
    assert!(err.contains("use 1KiB to 16MiB"), "{err}");
    for (ahead, lookahead) in [("11s", "60s"), ("5s", "8s")] {
        let err = Layers::new()
            .flag("fire_ahead", Some(ahead))
            .flag("lookahead", Some(lookahead))
            .build()
            .unwrap_err()
            .to_string();
        assert!(err.contains("at most half of lookahead"), "{err}");
    }
    let off = Layers::new()
        .flag("fire_ahead", Some("0s"))
        .build()
        .unwrap();
    assert_eq!(off.fire_ahead, Duration::ZERO);
    let env = |var: &str| (var == "CHIME_OBSERVER_COPIES").then(|| "all".to_string());
    let all = Layers::new().env(env).build().unwrap();
    assert_eq!(all.observer_copies, ObserverCopies::All);
    for threads in ["0", "many", "257"] {
        let err = Layers::new()
            .flag("worker_threads", Some(threads))
            .build()
            .unwrap_err()
            .to_string();
        assert!(err.contains("use auto or a whole number"), "{err}");
    }
    let env = |var: &str| (var == "CHIME_WORKER_THREADS").then(|| "3".to_string());
    let three = Layers::new().env(env).build().unwrap();
    assert_eq!(three.worker_threads(2), 3, "a set count wins over the CPUs");
    let err = Layers::new()
        .flag("observer_copies", Some("some"))
        .build()
        .unwrap_err()
        .to_string();
    assert!(err.contains("use registered or all"), "{err}");
}

#[test]
fn http_limits_are_bounded() {
    for (key, value, reason) in [
        ("http_header_timeout", "0s", "use 1s to 10m"),
        ("http_header_timeout", "1h", "use 1s to 10m"),
        ("http_max_connections", "0", "from 1 to 65536"),
        ("http_max_connections", "lots", "from 1 to 65536"),
    ] {
        let err = Layers::new()
            .flag(key, Some(value))
            .build()
            .unwrap_err()
            .to_string();
        assert!(err.contains(reason), "{key}={value}: {err}");
    }
    let env = |var: &str| match var {
        "CHIME_HTTP_HEADER_TIMEOUT" => Some("2s".to_string()),
        "CHIME_HTTP_MAX_CONNECTIONS" => Some("8".to_string()),
        _ => None,
    };
    let config = Layers::new().env(env).build().unwrap();
    assert_eq!(
        config.http,
        HttpSettings {
            header_timeout: Duration::from_secs(2),
            max_connections: 8
        }
    );
}

#[test]
fn bad_urls_never_show_their_password() {
    for (key, url) in [
        ("database_url", "mysql://u:hunter22@h/db"),
        (
            "database_url",
            "postgres://u@h/db?password=hunter22&sslmode=require&sslrootcert=/no/ca.pem",
        ),
        ("amqp_url", "amqps://u:hunter22@h/%2f?cacertfile=/no/ca.pem"),
        ("amqp_url", "amqp://u:hunter22@h:port/%2f"),
    ] {
        let err = Layers::new()
            .flag(key, Some(url))
            .build()
            .unwrap_err()
            .to_string();
        assert!(err.starts_with(&format!("invalid {key} ")), "{err}");
        assert!(!err.contains("hunter22"), "{err}");
    }
}

#[test]
fn sizes() {
    assert_eq!(parse_size("256KiB"), Ok(262_144));
    assert_eq!(parse_size("1MiB"), Ok(1_048_576));
    assert_eq!(parse_size("1000"), Ok(1000));
    assert!(parse_size("1GiB").is_err());
    assert!(parse_size("lots").is_err());
}

#[test]
fn urls_come_from_files_at_their_layer() {
    let dir = std::env::temp_dir().join(format!("chime-url-files-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let db_file = dir.join("database-url");
    std::fs::write(&db_file, "postgres://chime:hunter22@db/chime\n").unwrap();
    let mq_file = dir.join("amqp-url");
    std::fs::write(&mq_file, "amqp://chime:hunter22@mq:5672/%2f\r\n").unwrap();
    let env = |db: String, mq: String| {
        move |var: &str| match var {
            "CHIME_DATABASE_URL_FILE" => Some(db.clone()),
            "CHIME_AMQP_URL_FILE" => Some(mq.clone()),
            _ => None,
        }
    };
    let paths = (db_file.display().to_string(), mq_file.display().to_string());

    let config = Layers::new()
        .env(env(paths.0.clone(), paths.1.clone()))
        .build()
        .unwrap();
    assert_eq!(config.database_url, "postgres://chime:hunter22@db/chime");
    assert_eq!(config.amqp_url, "amqp://chime:hunter22@mq:5672/%2f");

    // A flag (a later layer) wins over the file given in the environment.
    let config = Layers::new()
        .env(env(paths.0.clone(), paths.1.clone()))
        .flag("database_url", Some("sqlite://other.db"))
        .build()
        .unwrap();
    assert_eq!(config.database_url, "sqlite://other.db");

    // Both at the same layer: an error naming both, no password.
    let err = Layers::new()
        .env(|var: &str| match var {
            "CHIME_DATABASE_URL_FILE" => Some(paths.0.clone()),
            "CHIME_DATABASE_URL" => Some("postgres://u:hunter22@h/db".to_string()),
            _ => None,
        })
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("database_url_file") && err.contains("give one of them"),
        "{err}"
    );
    assert!(!err.contains("hunter22"), "{err}");

    // A missing file, and a bad URL in a file: named by the file setting, no password.
    let err = Layers::new()
        .env(env(
            dir.join("missing").display().to_string(),
            paths.1.clone(),
        ))
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("invalid database_url_file") && err.contains("cannot read the file"),
        "{err}"
    );
    std::fs::write(&db_file, "mysql://chime:hunter22@db/chime\n").unwrap();
    let err = Layers::new()
        .env(env(paths.0.clone(), paths.1.clone()))
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("(from environment CHIME_DATABASE_URL_FILE)") && !err.contains("hunter22"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_password_in_a_flag_is_warned_about_without_showing_it() {
    let config = Layers::new()
        .flag("database_url", Some("postgres://u:hunter22@h/db"))
        .flag("amqp_url", Some("amqp://guest@127.0.0.1:5672/%2f"))
        .build()
        .unwrap();
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    let warning = &config.warnings[0];
    assert!(
        warning.contains("--database-url") && warning.contains("CHIME_DATABASE_URL_FILE"),
        "{warning}"
    );
    assert!(!warning.contains("hunter22"), "{warning}");
    // The same URL from the environment is not visible in ps: no warning.
    let config = Layers::new()
        .env(|var: &str| {
            (var == "CHIME_DATABASE_URL").then(|| "postgres://u:hunter22@h/db".to_string())
        })
        .build()
        .unwrap();
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
}

#[test]
fn reply_users_default_to_any_user_and_parse_from_the_environment() {
    assert_eq!(Config::default().reply_users, None);
    let env = |var: &str| (var == "CHIME_REPLY_USERS").then(|| "orders=shop,*=ops".to_string());
    let config = Layers::new().env(env).build().unwrap();
    let users = config.reply_users.expect("set");
    assert!(users.check_group(Some("shop"), "orders").is_ok());
    assert!(users.check_group(Some("shop"), "billing").is_err());
    let env = |var: &str| (var == "CHIME_REPLY_USERS").then(|| "orders".to_string());
    let err = Layers::new().env(env).build().unwrap_err().to_string();
    assert!(err.starts_with("invalid reply_users"), "{err}");
}
