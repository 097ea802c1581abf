//! TLS client settings for broker connections, and the PEM files they come from.
//!
//! Chime has one TLS stack: rustls with the *ring* crypto provider. This module owns
//! turning the files a user names (a CA bundle, a client certificate chain and its key)
//! into a rustls [`ClientConfig`], with errors that name the file and the cause. It never
//! puts a file's contents in an error, so a private key cannot leak through a message.
//!
//! Trust: with a CA bundle, only the certificates in that bundle are trusted; without
//! one, the operating system's roots are (read through `rustls-native-certs`: the
//! `SSL_CERT_FILE`/`SSL_CERT_DIR` variables when set, else the system store such as
//! `/etc/ssl/certs`). The server's name is always verified against its certificate.
//!
//! The scheduler uses [`read_certificates`] and [`read_private_key`] to check
//! PostgreSQL's `sslrootcert`/`sslcert`/`sslkey` files at start-up with the same errors.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

/// Why TLS settings could not be built. Messages name the file and the cause, never a
/// file's contents.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A named file could not be read.
    #[error("cannot read the {what} {path}: {source}")]
    Read {
        /// Which file: "CA bundle", "client certificate" or "client key".
        what: &'static str,
        /// The path as given.
        path: PathBuf,
        /// The reading error.
        source: std::io::Error,
    },
    /// A named file is not PEM, or holds nothing of the expected kind.
    #[error("the {what} {path} is not usable: {reason}")]
    NotPem {
        /// Which file.
        what: &'static str,
        /// The path as given.
        path: PathBuf,
        /// What is wrong with it (never its contents).
        reason: &'static str,
    },
    /// A CA bundle's certificate was refused as a trust anchor.
    #[error("the CA bundle {path} holds a certificate rustls cannot use as a root: {reason}")]
    BadRoot {
        /// The path as given.
        path: PathBuf,
        /// rustls' reason.
        reason: String,
    },
    /// No CA bundle was given and the system has no usable root certificate.
    #[error(
        "no CA bundle given and no system root certificate found; \
         name a CA bundle (cacertfile for RabbitMQ)"
    )]
    NoSystemRoots,
    /// The client certificate and key do not form an identity rustls accepts.
    #[error("the client certificate {cert} and key {key} cannot be used together: {reason}")]
    Identity {
        /// The certificate chain's path.
        cert: PathBuf,
        /// The key's path.
        key: PathBuf,
        /// rustls' reason (it never includes the key).
        reason: String,
    },
    /// The TLS protocol versions could not be set up (a build problem, not input).
    #[error("tls set-up failed: {0}")]
    Setup(String),
}

/// Where a TLS client's trust and identity come from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// A PEM CA bundle: when set, only these certificates are trusted; else the
    /// system's roots.
    pub ca_file: Option<PathBuf>,
    /// A PEM client certificate chain and its PEM private key, for mutual TLS.
    pub identity: Option<(PathBuf, PathBuf)>,
}

impl TlsFiles {
    /// Reads the files and builds a rustls client configuration (ring provider; TLS 1.2
    /// and 1.3; server certificate and name verified).
    pub fn client_config(&self) -> Result<ClientConfig, TlsError> {
        let mut roots = RootCertStore::empty();
        match &self.ca_file {
            Some(path) => {
                for cert in read_certificates(path, "CA bundle")? {
                    roots.add(cert).map_err(|e| TlsError::BadRoot {
                        path: path.clone(),
                        reason: e.to_string(),
                    })?;
                }
            }
            None => {
                let native = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(native.certs);
                if roots.is_empty() {
                    return Err(TlsError::NoSystemRoots);
                }
            }
        }
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Setup(e.to_string()))?
            .with_root_certificates(roots);
        match &self.identity {
            None => Ok(builder.with_no_client_auth()),
            Some((cert, key)) => {
                let chain = read_certificates(cert, "client certificate")?;
                let private = read_private_key(key)?;
                builder
                    .with_client_auth_cert(chain, private)
                    .map_err(|e| TlsError::Identity {
                        cert: cert.clone(),
                        key: key.clone(),
                        reason: e.to_string(),
                    })
            }
        }
    }
}

/// The crypto provider every Chime TLS client uses: rustls' *ring*.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The PEM certificates in `path` (at least one). `what` names the file in errors
/// ("CA bundle", "client certificate").
pub fn read_certificates(
    path: &Path,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(path, what)?;
    let not_pem = |reason| TlsError::NotPem {
        what,
        path: path.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| not_pem("not valid PEM"))?;
    if certs.is_empty() {
        return Err(not_pem(
            "no PEM certificate (-----BEGIN CERTIFICATE-----) in it",
        ));
    }
    Ok(certs)
}

/// The PEM private key (PKCS#8, PKCS#1 or SEC1, unencrypted) in `path`.
pub fn read_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    const WHAT: &str = "client key";
    let bytes = read(path, WHAT)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::NotPem {
        what: WHAT,
        path: path.to_path_buf(),
        reason: match e {
            rustls_pki_types::pem::Error::NoItemsFound => {
                "no unencrypted PEM private key (-----BEGIN PRIVATE KEY-----) in it"
            }
            _ => "not valid PEM",
        },
    })
}

fn read(path: &Path, what: &'static str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chime_testkit::certs::TestCa;

    fn temp_ca() -> TestCa {
        let dir = std::env::temp_dir().join(format!("chime-tls-unit-{}", uuid::Uuid::now_v7()));
        TestCa::new(dir, "ca")
    }

    #[test]
    fn builds_with_a_ca_bundle_and_an_identity() {
        let ca = temp_ca();
        let client = ca.client("app", "app");
        let files = TlsFiles {
            ca_file: Some(ca.ca_cert()),
            identity: Some((client.cert.clone(), client.key.clone())),
        };
        let config = files.client_config().unwrap();
        assert!(config.client_auth_cert_resolver.has_certs());
        let anonymous = TlsFiles {
            ca_file: Some(ca.ca_cert()),
            identity: None,
        };
        assert!(
            !anonymous
                .client_config()
                .unwrap()
                .client_auth_cert_resolver
                .has_certs()
        );
        let _ = std::fs::remove_dir_all(ca.ca_cert().parent().unwrap());
    }

    #[test]
    fn missing_and_non_pem_files_are_named() {
        let ca = temp_ca();
        let dir = ca.ca_cert().parent().unwrap().to_path_buf();
        let err = TlsFiles {
            ca_file: Some(dir.join("nope.pem")),
            identity: None,
        }
        .client_config()
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("cannot read the CA bundle") && err.contains("nope.pem"),
            "{err}"
        );

        let garbage = dir.join("garbage.pem");
        std::fs::write(&garbage, "hello, not a certificate\n").unwrap();
        let err = read_certificates(&garbage, "CA bundle")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("garbage.pem") && err.contains("no PEM certificate"),
            "{err}"
        );

        // A certificate where the key should be: refused without printing the file.
        let client = ca.client("app", "app");
        let err = TlsFiles {
            ca_file: Some(ca.ca_cert()),
            identity: Some((client.cert.clone(), client.cert.clone())),
        }
        .client_config()
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("client key") && !err.contains("BEGIN CERT"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
