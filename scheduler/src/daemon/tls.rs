//! HTTPS for the API: the certificate chain and private key from two PEM files, served by
//! rustls (ring provider), and swapped for new connections when the files change on disk
//! (certificate rotation without a restart).
//!
//! Usage: [`TlsFiles::from_settings`] checks that `http_tls_cert_file` and
//! `http_tls_key_file` are given together; [`ServerTls::load`] reads them (a start-up
//! error if they do not parse or do not belong together) and hands out the acceptor that
//! [`super::http::serve`] runs each connection's handshake with; [`ServerTls::watch`]
//! looks at the files every [`RELOAD_INTERVAL`].
//!
//! Rotation: when the files' contents change, the new pair is parsed and checked (the
//! key must match the certificate) before it replaces the old one; connections opened
//! afterwards get the new certificate, open ones keep theirs. A pair that does not load
//! (half written, a key of another certificate, not PEM) leaves the previous certificate
//! serving and logs one WARN per change of the files. No error or log line quotes the
//! files' contents.
//!
//! Metrics: `chime_http_tls_reloads_total{outcome="loaded"|"rejected"}`.

use std::{
    hash::{DefaultHasher, Hash, Hasher},
    io,
    path::{Path, PathBuf},
    sync::{Arc, PoisonError, RwLock},
    time::Duration,
};

use rustls::{
    ServerConfig,
    crypto::CryptoProvider,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::telemetry;

/// How often the certificate and key files are checked for a change.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(2);

/// The rustls crypto provider of the workspace (ring).
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Makes ring the process's default rustls provider, which reqwest's client builder
/// needs (the workspace compiles no other provider). Later calls do nothing.
pub fn install_crypto_provider() {
    // An error means a provider is installed already, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The certificate chain and key files of the API's HTTPS listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain, the server's certificate first (`http_tls_cert_file`).
    pub cert: PathBuf,
    /// PEM private key, PKCS#8, PKCS#1 or SEC1 (`http_tls_key_file`).
    pub key: PathBuf,
}

impl TlsFiles {
    /// The files from the two settings (empty means unset): both or neither. `None`
    /// serves plain HTTP; one without the other is an error naming the missing setting.
    pub fn from_settings(cert: &str, key: &str) -> Result<Option<Self>, MissingTlsSetting> {
        match (cert.trim(), key.trim()) {
            ("", "") => Ok(None),
            (_, "") => Err(MissingTlsSetting::Key),
            ("", _) => Err(MissingTlsSetting::Cert),
            (cert, key) => Ok(Some(Self {
                cert: PathBuf::from(cert),
                key: PathBuf::from(key),
            })),
        }
    }
}

/// One of the two HTTPS settings is given without the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MissingTlsSetting {
    /// The certificate is given, the key is not.
    #[error(
        "http_tls_key_file (CHIME_HTTP_TLS_KEY_FILE) is not set: HTTPS needs the certificate's private key too"
    )]
    Key,
    /// The key is given, the certificate is not.
    #[error(
        "http_tls_cert_file (CHIME_HTTP_TLS_CERT_FILE) is not set: HTTPS needs the certificate chain too"
    )]
    Cert,
}

/// Why a certificate and key pair does not load. Never quotes the files' contents.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read the HTTPS {what} file {path}: {source}")]
    Read {
        /// `certificate` or `key`.
        what: &'static str,
        /// The file.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// The certificate file holds no PEM certificate, or one that does not parse.
    #[error(
        "the HTTPS certificate file {path} holds no valid PEM certificate (-----BEGIN CERTIFICATE-----)"
    )]
    BadCertificate {
        /// The file.
        path: String,
    },
    /// The key file holds no PEM private key, or one that does not parse.
    #[error("the HTTPS key file {path} holds no valid PEM private key (PKCS#8, PKCS#1 or SEC1)")]
    BadKey {
        /// The file.
        path: String,
    },
    /// The key parses but rustls cannot sign with it (an unsupported algorithm).
    #[error("the HTTPS key file {path} holds a key that cannot be used: {reason}")]
    UnusableKey {
        /// The file.
        path: String,
        /// rustls's reason (names the problem, not the key).
        reason: String,
    },
    /// The key is not the certificate's.
    #[error("the HTTPS key in {key} does not belong to the certificate in {cert}")]
    Mismatch {
        /// The certificate file.
        cert: String,
        /// The key file.
        key: String,
    },
    /// rustls refused the server configuration.
    #[error("cannot configure HTTPS: {0}")]
    Config(String),
}

/// The HTTPS side of the listener: the acceptor for new connections and what reloads
/// its certificate.
pub struct ServerTls {
    acceptor: TlsAcceptor,
    reloader: CertReloader,
}

impl ServerTls {
    /// Loads `files`: an error if they cannot be read, do not parse or do not match.
    pub fn load(files: TlsFiles) -> Result<Self, TlsError> {
        let provider = crypto_provider();
        let cert = read(&files.cert, "certificate");
        let key = read(&files.key, "key");
        let seen = fingerprint(&cert, &key);
        let certified = certified_key(&files, cert?, key?, &provider)?;
        let resolver = Arc::new(CertResolver {
            current: RwLock::new(Arc::new(certified)),
        });
        let mut config = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|error| TlsError::Config(error.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            reloader: CertReloader {
                files,
                provider,
                resolver,
                seen,
            },
        })
    }

    /// The acceptor that runs a new connection's handshake with the current certificate.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.clone()
    }

    /// The reloader, for a test that drives [`CertReloader::check`] itself.
    pub fn reloader(&mut self) -> &mut CertReloader {
        &mut self.reloader
    }

    /// Checks the files every [`RELOAD_INTERVAL`] until `stop` is cancelled, logging each
    /// reload and each change that does not load.
    pub async fn watch(mut self, stop: CancellationToken) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(RELOAD_INTERVAL) => {}
            }
            match self.reloader.check() {
                Reload::Unchanged => {}
                Reload::Loaded => info!(
                    cert = %self.reloader.files.cert.display(),
                    "https certificate reloaded: new connections get the new certificate"
                ),
                Reload::Rejected(error) => warn!(
                    %error,
                    "https certificate files changed but do not load; still serving the previous certificate"
                ),
            }
        }
    }
}

/// What one look at the files found.
#[derive(Debug)]
pub enum Reload {
    /// The files are as last seen.
    Unchanged,
    /// They changed and the new pair now serves new connections.
    Loaded,
    /// They changed but do not load; the previous pair keeps serving.
    Rejected(TlsError),
}

/// Reloads the certificate when its files change.
#[derive(Debug)]
pub struct CertReloader {
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    resolver: Arc<CertResolver>,
    /// The files' contents last looked at (loaded or rejected), as a hash.
    seen: u64,
}

impl CertReloader {
    /// Reads the files; if they differ from the last look, loads them and, if they load,
    /// makes them the certificate of new connections.
    pub fn check(&mut self) -> Reload {
        let cert = read(&self.files.cert, "certificate");
        let key = read(&self.files.key, "key");
        let seen = fingerprint(&cert, &key);
        if seen == self.seen {
            return Reload::Unchanged;
        }
        self.seen = seen;
        let loaded = cert
            .and_then(|cert| Ok((cert, key?)))
            .and_then(|(cert, key)| certified_key(&self.files, cert, key, &self.provider));
        match loaded {
            Ok(certified) => {
                self.resolver.set(Arc::new(certified));
                metrics::counter!(telemetry::HTTP_TLS_RELOADS, "outcome" => "loaded").increment(1);
                Reload::Loaded
            }
            Err(error) => {
                metrics::counter!(telemetry::HTTP_TLS_RELOADS, "outcome" => "rejected")
                    .increment(1);
                Reload::Rejected(error)
            }
        }
    }
}

/// Hands every handshake the current certificate.
#[derive(Debug)]
struct CertResolver {
    current: RwLock<Arc<CertifiedKey>>,
}

impl CertResolver {
    fn set(&self, certified: Arc<CertifiedKey>) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = certified;
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

fn read(path: &Path, what: &'static str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.display().to_string(),
        source,
    })
}

/// A hash of what reading the two files gave (contents, or the kind of error).
fn fingerprint(cert: &Result<Vec<u8>, TlsError>, key: &Result<Vec<u8>, TlsError>) -> u64 {
    let mut hasher = DefaultHasher::new();
    for file in [cert, key] {
        match file {
            Ok(bytes) => bytes.hash(&mut hasher),
            Err(TlsError::Read { source, .. }) => format!("{:?}", source.kind()).hash(&mut hasher),
            Err(_) => {}
        }
    }
    hasher.finish()
}

/// The chain and key parsed from PEM and checked to belong together.
fn certified_key(
    files: &TlsFiles,
    cert: Vec<u8>,
    key: Vec<u8>,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let shown = |path: &Path| path.display().to_string();
    let bad_cert = || TlsError::BadCertificate {
        path: shown(&files.cert),
    };
    // A PEM error's text can quote a line of the file: none is passed on.
    let chain = CertificateDer::pem_slice_iter(&cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| bad_cert())?;
    if chain.is_empty() {
        return Err(bad_cert());
    }
    let key = PrivateKeyDer::from_pem_slice(&key).map_err(|_| TlsError::BadKey {
        path: shown(&files.key),
    })?;
    CertifiedKey::from_der(chain, key, provider).map_err(|error| match error {
        rustls::Error::InconsistentKeys(_) => TlsError::Mismatch {
            cert: shown(&files.cert),
            key: shown(&files.key),
        },
        rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => bad_cert(),
        other => TlsError::UnusableKey {
            path: shown(&files.key),
            reason: other.to_string(),
        },
    })
}

#[cfg(test)]
mod tests;
