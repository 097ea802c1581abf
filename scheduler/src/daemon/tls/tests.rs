//! Unit tests of the HTTPS certificate files: both-or-neither, load errors that never
//! quote the files, and reloads that keep the old pair when the new one does not load.

use std::fs;

use chime_testkit::certs::{PemPair, TestCa};

use super::*;

/// A directory of certificates, removed when the test ends.
struct Certs {
    dir: PathBuf,
    ca: TestCa,
}

impl Certs {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("chime-tls-{}", uuid::Uuid::now_v7()));
        let ca = TestCa::new(&dir, "ca");
        Self { dir, ca }
    }

    fn pair(&self, stem: &str) -> PemPair {
        self.ca.server(stem, &["localhost", "127.0.0.1"])
    }

    fn files(pair: &PemPair) -> TlsFiles {
        TlsFiles {
            cert: pair.cert.clone(),
            key: pair.key.clone(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The DER of the first certificate in the PEM file `path`.
fn leaf(path: &Path) -> Vec<u8> {
    CertificateDer::pem_file_iter(path)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .to_vec()
}

/// The DER of the certificate new handshakes get.
fn served(tls: &mut ServerTls) -> Vec<u8> {
    let current = tls.reloader().resolver.current.read().unwrap().clone();
    current.cert[0].to_vec()
}

fn load_error(files: TlsFiles) -> String {
    match ServerTls::load(files) {
        Ok(_) => panic!("the pair loaded"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn the_two_files_come_together_or_not_at_all() {
    assert_eq!(TlsFiles::from_settings("", ""), Ok(None));
    assert_eq!(TlsFiles::from_settings(" ", ""), Ok(None));
    assert_eq!(
        TlsFiles::from_settings("/etc/chime/tls.crt", "/etc/chime/tls.key"),
        Ok(Some(TlsFiles {
            cert: PathBuf::from("/etc/chime/tls.crt"),
            key: PathBuf::from("/etc/chime/tls.key"),
        }))
    );
    let no_key = TlsFiles::from_settings("/etc/chime/tls.crt", "").unwrap_err();
    assert_eq!(no_key, MissingTlsSetting::Key);
    assert!(
        no_key
            .to_string()
            .starts_with("http_tls_key_file (CHIME_HTTP_TLS_KEY_FILE) is not set"),
        "{no_key}"
    );
    let no_cert = TlsFiles::from_settings("", "/etc/chime/tls.key").unwrap_err();
    assert!(
        no_cert
            .to_string()
            .starts_with("http_tls_cert_file (CHIME_HTTP_TLS_CERT_FILE) is not set"),
        "{no_cert}"
    );
}

#[test]
fn the_configuration_names_the_missing_setting() {
    use crate::config::Layers;
    let with = |vars: &'static [(&'static str, &'static str)]| {
        Layers::new()
            .env(|var| {
                vars.iter()
                    .find(|(name, _)| *name == var)
                    .map(|(_, v)| v.to_string())
            })
            .build()
    };
    assert_eq!(with(&[]).unwrap().http_tls, None);
    let both = with(&[
        ("CHIME_HTTP_TLS_CERT_FILE", "/tls/chimed.crt"),
        ("CHIME_HTTP_TLS_KEY_FILE", "/tls/chimed.key"),
    ])
    .unwrap();
    assert_eq!(both.http_tls.unwrap().key, PathBuf::from("/tls/chimed.key"));
    let error = with(&[("CHIME_HTTP_TLS_CERT_FILE", "/tls/chimed.crt")])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("http_tls_cert_file")
            && error.contains("CHIME_HTTP_TLS_KEY_FILE) is not set"),
        "{error}"
    );
    let error = with(&[("CHIME_HTTP_TLS_KEY_FILE", "/tls/chimed.key")])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("CHIME_HTTP_TLS_CERT_FILE) is not set"),
        "{error}"
    );
}

#[test]
fn a_good_pair_loads_and_is_served() {
    let certs = Certs::new();
    let pair = certs.pair("server");
    let mut tls = ServerTls::load(Certs::files(&pair)).expect("the pair loads");
    assert_eq!(served(&mut tls), leaf(&pair.cert));
    assert!(matches!(tls.reloader().check(), Reload::Unchanged));
}

#[test]
fn files_that_do_not_load_are_named_without_their_contents() {
    let certs = Certs::new();
    let pair = certs.pair("server");
    let other = certs.pair("other");

    let missing = load_error(TlsFiles {
        cert: certs.path("nowhere.crt"),
        key: pair.key.clone(),
    });
    assert!(
        missing.starts_with("cannot read the HTTPS certificate file ")
            && missing.contains("nowhere.crt"),
        "{missing}"
    );

    let not_pem = certs.path("not-pem.crt");
    fs::write(&not_pem, "just some text\n").unwrap();
    let error = load_error(TlsFiles {
        cert: not_pem,
        key: pair.key.clone(),
    });
    assert!(error.contains("holds no valid PEM certificate"), "{error}");

    // A damaged key: neither its base64 nor a quoted line may reach the message.
    let secret = "c2VjcmV0LWtleS1tYXRlcmlhbA";
    let damaged = certs.path("damaged.key");
    fs::write(
        &damaged,
        format!("-----BEGIN PRIVATE KEY-----\n{secret}!!\n-----END PRIVATE KEY-----\n"),
    )
    .unwrap();
    let unterminated = certs.path("unterminated.key");
    fs::write(
        &unterminated,
        format!("-----BEGIN PRIVATE KEY-----\n{secret}\n"),
    )
    .unwrap();
    let illegal = certs.path("illegal.key");
    fs::write(&illegal, format!("-----BEGIN {secret}\n")).unwrap();
    for key in [damaged, unterminated, illegal] {
        let error = load_error(TlsFiles {
            cert: pair.cert.clone(),
            key,
        });
        assert!(
            error.contains("holds no valid PEM private key") && !error.contains(secret),
            "{error}"
        );
    }

    let error = load_error(TlsFiles {
        cert: pair.cert.clone(),
        key: other.key.clone(),
    });
    assert!(
        error.contains("does not belong to the certificate") && error.contains("server.crt"),
        "{error}"
    );
}

#[test]
fn a_changed_pair_is_served_and_a_broken_one_keeps_the_old() {
    let certs = Certs::new();
    let live = certs.pair("live");
    let mut tls = ServerTls::load(Certs::files(&live)).unwrap();
    let first = leaf(&live.cert);

    // Rotation written in two steps: between them the pair does not match.
    let next = certs.pair("next");
    fs::copy(&next.cert, &live.cert).unwrap();
    let half = tls.reloader().check();
    assert!(
        matches!(half, Reload::Rejected(TlsError::Mismatch { .. })),
        "{half:?}"
    );
    assert_eq!(served(&mut tls), first, "the old pair keeps serving");
    // Nothing changed since: no second rejection (one WARN per change).
    assert!(matches!(tls.reloader().check(), Reload::Unchanged));
    fs::copy(&next.key, &live.key).unwrap();
    assert!(matches!(tls.reloader().check(), Reload::Loaded));
    let second = leaf(&next.cert);
    assert_ne!(second, first);
    assert_eq!(served(&mut tls), second);

    // A broken replacement, then a deleted key: rejected, the second pair serves on.
    fs::write(&live.cert, "-----BEGIN CERTIFICATE-----\ntruncat").unwrap();
    let broken = tls.reloader().check();
    assert!(
        matches!(broken, Reload::Rejected(TlsError::BadCertificate { .. })),
        "{broken:?}"
    );
    fs::remove_file(&live.key).unwrap();
    let gone = tls.reloader().check();
    assert!(
        matches!(
            gone,
            Reload::Rejected(TlsError::Read {
                what: "certificate" | "key",
                ..
            })
        ),
        "{gone:?}"
    );
    assert_eq!(served(&mut tls), second);

    // Repaired: served again.
    let last = certs.pair("last");
    fs::copy(&last.cert, &live.cert).unwrap();
    fs::copy(&last.key, &live.key).unwrap();
    assert!(matches!(tls.reloader().check(), Reload::Loaded));
    assert_eq!(served(&mut tls), leaf(&last.cert));
}
