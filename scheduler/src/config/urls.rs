//! Checks of the store and broker URLs at start-up, before anything connects: a scheme
//! chimed supports, and no request for TLS (not supported yet — refused rather than
//! silently downgraded to plaintext). Errors never contain a secret of the URL; see
//! [`chime_consumer::url`] for the redaction every printed URL goes through.

use std::str::FromStr;

use chime_consumer::url::{TLS_UNSUPPORTED, scrub};
use sqlx::postgres::PgConnectOptions;

pub use chime_consumer::url::check_amqp_url;

/// PostgreSQL `sslmode` values that demand TLS.
const TLS_MODES: &[&str] = &["require", "verify-ca", "verify-full"];
/// PostgreSQL options that only make sense with TLS.
const TLS_OPTIONS: &[&str] = &["sslrootcert", "sslcert", "sslkey", "sslpassword"];

/// Checks `database_url`: `sqlite:` or `postgres:`/`postgresql:` that parses, with no
/// `sslmode` that demands TLS and no certificate options.
pub fn check_database_url(url: &str) -> Result<(), String> {
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("sqlite:") {
        return Ok(());
    }
    if !(lower.starts_with("postgres:") || lower.starts_with("postgresql:")) {
        return Err(
            "unsupported database: use sqlite://FILE or postgres://USER:PASS@HOST/DB".to_string(),
        );
    }
    let query = url.split_once('?').map_or("", |(_, query)| query);
    for (key, value) in query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_ascii_lowercase()))
    {
        if key == "sslmode" && TLS_MODES.contains(&value.as_str()) {
            return Err(format!(
                "{TLS_UNSUPPORTED}: sslmode={value} is refused rather than connected in plaintext; \
                 use sslmode=disable or prefer (on a trusted network or through a TLS tunnel)"
            ));
        }
        if TLS_OPTIONS.contains(&key.as_str()) {
            return Err(format!(
                "{TLS_UNSUPPORTED}: the {key} option asks for TLS; remove it (and any sslmode \
                 that requires TLS)"
            ));
        }
    }
    PgConnectOptions::from_str(url)
        .map(|_| ())
        .map_err(|e| format!("not a valid PostgreSQL URL: {}", scrub(&e.to_string(), url)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_and_unknown_schemes_are_refused_without_secrets() {
        for fine in [
            "sqlite://chime.db",
            "postgres://u:pw@127.0.0.1/db",
            "postgresql://u@h/db?password=pw&sslmode=disable",
            "postgres://u@h/db?sslmode=prefer",
        ] {
            assert_eq!(check_database_url(fine), Ok(()), "{fine}");
        }
        for tls in [
            "postgres://u:hunter22@h/db?sslmode=require",
            "postgres://u:hunter22@h/db?sslmode=verify-full",
            "postgres://u:hunter22@h/db?sslmode=VERIFY-CA",
            "postgres://u:hunter22@h/db?sslrootcert=/ca.pem",
        ] {
            let err = check_database_url(tls).unwrap_err();
            assert!(err.starts_with(TLS_UNSUPPORTED), "{tls}: {err}");
            assert!(!err.contains("hunter22"), "{err}");
        }
        for bad in [
            "mysql://u:hunter22@h/db",
            "postgres://u:hunter22@h:port/db",
            "postgres://u@h/db?password=hunter22&port=x",
        ] {
            let err = check_database_url(bad).unwrap_err();
            assert!(!err.contains("hunter22"), "{bad}: {err}");
        }
    }
}
