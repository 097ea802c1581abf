//! Checks of the store and broker URLs at start-up, before anything connects: a scheme
//! chimed supports, a URL that parses, and for TLS the certificate files it names
//! readable PEM (so a typo in a path fails at start-up, naming the file, not at the
//! first connection). Errors never contain a secret of the URL; see
//! [`chime_consumer::url`] for the redaction every printed URL goes through.

use std::{path::Path, str::FromStr};

use chime_consumer::{tls, url::scrub};
use sqlx::postgres::PgConnectOptions;

pub use chime_consumer::connect::check_amqp_url;

/// Checks `database_url`: `sqlite:` or `postgres:`/`postgresql:` that parses; the
/// `sslrootcert`, `sslcert` and `sslkey` files it names (unless given inline as PEM)
/// must be readable PEM, and `sslcert` and `sslkey` come together.
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
    PgConnectOptions::from_str(url)
        .map_err(|e| format!("not a valid PostgreSQL URL: {}", scrub(&e.to_string(), url)))?;
    let mut cert = None;
    let mut key = None;
    for (name, value) in query_pairs(url) {
        if name == "sslpassword" {
            return Err(
                "sslpassword is not supported (an encrypted client key): use an \
                        unencrypted key file readable only by chimed (mode 0600)"
                    .to_string(),
            );
        }
        if is_inline_pem(&value) {
            continue;
        }
        let path = Path::new(&value);
        let checked = match name.as_str() {
            "sslrootcert" | "ssl-root-cert" | "ssl-ca" => {
                tls::read_certificates(path, "CA bundle (sslrootcert)").map(drop)
            }
            "sslcert" | "ssl-cert" => {
                cert = Some(());
                tls::read_certificates(path, "client certificate (sslcert)").map(drop)
            }
            "sslkey" | "ssl-key" => {
                key = Some(());
                tls::read_private_key(path).map(drop)
            }
            _ => Ok(()),
        };
        checked.map_err(|e| scrub(&e.to_string(), url))?;
    }
    match (cert, key) {
        (Some(()), None) => Err("sslcert needs sslkey (the client key)".to_string()),
        (None, Some(())) => Err("sslkey needs sslcert (the client certificate)".to_string()),
        _ => Ok(()),
    }
}

/// The query's pairs, keys lowercased, values percent-decoded.
fn query_pairs(url: &str) -> Vec<(String, String)> {
    let query = url.split_once('?').map_or("", |(_, query)| query);
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_ascii_lowercase(), percent_decode(v)))
        .collect()
}

/// sqlx takes a certificate given in the URL itself when it is PEM text.
fn is_inline_pem(value: &str) -> bool {
    let trimmed = value.trim();
    trimmed.starts_with("-----BEGIN") && trimmed.ends_with("-----")
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: Option<&u8>| b.and_then(|b| (*b as char).to_digit(16));
        match (bytes[i], hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, ..) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_urls_are_accepted_and_unknown_schemes_refused_without_secrets() {
        for fine in [
            "sqlite://chime.db",
            "postgres://u:pw@127.0.0.1/db",
            "postgresql://u@h/db?password=pw&sslmode=disable",
            "postgres://u@h/db?sslmode=prefer",
            "postgres://u:hunter22@h/db?sslmode=require",
            "postgres://u:hunter22@h/db?sslmode=verify-full",
            "postgres://u:hunter22@h/db?sslmode=VERIFY-CA",
        ] {
            assert_eq!(check_database_url(fine), Ok(()), "{fine}");
        }
        for bad in [
            "mysql://u:hunter22@h/db",
            "postgres://u:hunter22@h:port/db",
            "postgres://u@h/db?password=hunter22&port=x",
            "postgres://u:hunter22@h/db?sslmode=sometimes",
            "postgres://u@h/db?sslmode=verify-full&sslpassword=hunter22",
        ] {
            let err = check_database_url(bad).unwrap_err();
            assert!(!err.contains("hunter22"), "{bad}: {err}");
        }
    }

    #[test]
    fn certificate_files_are_checked_at_start_up() {
        let dir = std::env::temp_dir().join(format!("chime-urls-{}", uuid::Uuid::now_v7()));
        let ca = chime_testkit::certs::TestCa::new(&dir, "ca");
        let client = ca.client("client", "chime");
        let ca_file = ca.ca_cert();
        let good = format!(
            "postgres://u:hunter22@h/db?sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey={}",
            ca_file.display(),
            client.cert.display(),
            client.key.display()
        );
        assert_eq!(check_database_url(&good), Ok(()));

        let missing = "postgres://u:hunter22@h/db?sslmode=verify-full&sslrootcert=/no/such/ca.pem";
        let missing_err = check_database_url(missing).unwrap_err();
        assert!(
            missing_err.contains("cannot read the CA bundle (sslrootcert) /no/such/ca.pem"),
            "{missing_err}"
        );
        let not_pem = dir.join("junk.pem");
        std::fs::write(&not_pem, "junk").unwrap();
        let err = check_database_url(&format!(
            "postgres://u:hunter22@h/db?sslmode=verify-ca&sslrootcert={}",
            not_pem.display()
        ))
        .unwrap_err();
        assert!(
            err.contains("junk.pem") && err.contains("no PEM certificate"),
            "{err}"
        );
        let err = check_database_url(&format!(
            "postgres://u:hunter22@h/db?sslmode=require&sslcert={}",
            client.cert.display()
        ))
        .unwrap_err();
        assert!(err.contains("sslcert needs sslkey"), "{err}");
        for err in [missing_err, err] {
            assert!(!err.contains("hunter22"), "{err}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
