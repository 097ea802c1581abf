//! Opening a RabbitMQ connection from a URL: `amqp://` in plaintext, `amqps://` over TLS.
//! `chimed`, the consumer and the observer all connect through [`connect`], so the URL
//! means the same everywhere.
//!
//! TLS options are RabbitMQ's own URI query parameters, parsed once here ([`BrokerUrl`]):
//! `cacertfile` (a PEM CA bundle; without it the system's roots are trusted),
//! `certfile` + `keyfile` (a client certificate for mutual TLS), `server_name_indication`
//! (the name to send and verify, when it differs from the URL's host) and `verify`
//! (`verify_peer` only). `auth_mechanism=external` (RabbitMQ's EXTERNAL mechanism: the
//! user is the client certificate's name) is understood by lapin. A TLS option on an
//! `amqp://` URL is an error, never ignored: nothing asked to be encrypted is sent in
//! plaintext. Errors never contain the URL's password.

use std::{net::SocketAddr, path::PathBuf, str::FromStr, sync::Arc};

use lapin::{
    AsyncTcpStream, Connection, ConnectionProperties,
    tcp::RustlsConnector,
    uri::{AMQPScheme, AMQPUri},
};
use rustls_pki_types::ServerName;

use crate::{
    tls::{TlsError, TlsFiles},
    url::scrub,
};

/// A RabbitMQ URL, parsed and checked: where to connect and, for `amqps://`, how.
#[derive(Debug, Clone)]
pub struct BrokerUrl {
    uri: AMQPUri,
    tls: Option<BrokerTls>,
}

/// The TLS half of an `amqps://` URL.
#[derive(Debug, Clone)]
struct BrokerTls {
    files: TlsFiles,
    /// The name sent (SNI) and verified against the broker's certificate.
    server_name: String,
}

/// The query parameters that ask for TLS.
const TLS_KEYS: &[&str] = &[
    "cacertfile",
    "certfile",
    "keyfile",
    "server_name_indication",
    "verify",
    "fail_if_no_peer_cert",
];

impl BrokerUrl {
    /// Parses `url` without touching the files it names. The error never contains a
    /// secret of `url`.
    pub fn parse(url: &str) -> Result<Self, String> {
        let scheme = url
            .split_once("://")
            .map(|(scheme, _)| scheme.to_ascii_lowercase());
        if !matches!(scheme.as_deref(), Some("amqp" | "amqps")) {
            return Err("not a RabbitMQ URL: use amqp://USER:PASS@HOST:PORT/VHOST \
                 (or amqps:// for TLS)"
                .to_string());
        }
        let invalid = |e: String| format!("not a valid RabbitMQ URL: {}", scrub(&e, url));
        let mut uri = AMQPUri::from_str(url).map_err(invalid)?;
        let parsed = url::Url::parse(url).map_err(|e| invalid(e.to_string()))?;
        // amq-protocol-uri keeps only DNS names (an IP address becomes "localhost"):
        // connect to, and verify, the host as written.
        match parsed.host() {
            Some(url::Host::Domain(_)) | None => {}
            Some(url::Host::Ipv4(ip)) => uri.authority.host = ip.to_string(),
            Some(url::Host::Ipv6(ip)) => uri.authority.host = ip.to_string(),
        }
        let mut options = TlsOptions::default();
        for (key, value) in parsed.query_pairs() {
            let key = key.to_ascii_lowercase();
            if TLS_KEYS.contains(&key.as_str()) {
                options.set(&key, &value)?;
            }
        }
        let tls = match uri.scheme {
            AMQPScheme::AMQP => {
                if let Some(key) = options.given.first() {
                    return Err(format!(
                        "the {key} option asks for TLS but the URL is amqp://; use amqps://"
                    ));
                }
                None
            }
            AMQPScheme::AMQPS => Some(options.into_tls(&uri.authority.host)?),
        };
        Ok(Self { uri, tls })
    }

    /// Parses `url` and, for `amqps://`, reads the CA bundle and client certificate it
    /// names, so a missing or broken file is reported at start-up, not at first connect.
    pub fn check(url: &str) -> Result<Self, String> {
        let parsed = Self::parse(url)?;
        if let Some(tls) = &parsed.tls {
            tls.files.client_config().map_err(|e| e.to_string())?;
        }
        Ok(parsed)
    }

    /// Whether the URL is `amqps://`.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The host connected to.
    pub fn host(&self) -> &str {
        &self.uri.authority.host
    }

    /// Connects (TLS handshake and AMQP handshake). The CA bundle and client
    /// certificate are read again on every call, so rotated files are picked up at
    /// the next reconnect.
    pub async fn connect(
        &self,
        properties: ConnectionProperties,
    ) -> Result<Connection, lapin::Error> {
        let Some(tls) = &self.tls else {
            return Connection::connect_uri(self.uri.clone(), properties).await;
        };
        let config = tls.files.client_config().map_err(tls_setup_error)?;
        let connector = RustlsConnector::from(Arc::new(config));
        let runtime = lapin::runtime::default_runtime()?;
        let host = self.uri.authority.host.clone();
        let port = self.uri.authority.port;
        let server_name = tls.server_name.clone();
        Connection::connector(
            self.uri.clone(),
            runtime,
            async move |_uri, runtime| {
                let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
                    .await?
                    .collect();
                let stream = AsyncTcpStream::connect(&runtime, addrs).await?;
                stream
                    .into_rustls(&connector, &server_name)
                    .await
                    .map_err(|e| {
                        std::io::Error::new(
                            e.kind(),
                            format!(
                                "tls handshake with {host}:{port} (verifying the name \
                                 {server_name}) failed: {e}"
                            ),
                        )
                        .into()
                    })
            },
            properties,
        )
        .await
    }
}

/// Connects to the broker at `url` (`amqp://` or `amqps://`); see the module docs. A
/// bad URL is an error of kind I/O whose text never contains the password.
pub async fn connect(
    url: &str,
    properties: ConnectionProperties,
) -> Result<Connection, lapin::Error> {
    let broker = BrokerUrl::parse(url).map_err(|e| lapin::Error::from(std::io::Error::other(e)))?;
    broker.connect(properties).await
}

fn tls_setup_error(error: TlsError) -> lapin::Error {
    std::io::Error::other(error.to_string()).into()
}

/// The TLS query parameters as given.
#[derive(Default)]
struct TlsOptions {
    given: Vec<String>,
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    server_name: Option<String>,
}

impl TlsOptions {
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        self.given.push(key.to_string());
        let path = || {
            if value.is_empty() {
                Err(format!("the {key} option needs a file path"))
            } else {
                Ok(Some(PathBuf::from(value)))
            }
        };
        match key {
            "cacertfile" => self.ca_file = path()?,
            "certfile" => self.cert_file = path()?,
            "keyfile" => self.key_file = path()?,
            "server_name_indication" => match value {
                "disable" => {
                    return Err(
                        "server_name_indication=disable is not supported: chime always \
                         verifies the broker's name; give the name its certificate carries"
                            .to_string(),
                    );
                }
                "" => return Err("server_name_indication needs a host name".to_string()),
                name => self.server_name = Some(name.to_string()),
            },
            "verify" => match value {
                "verify_peer" => {}
                "verify_none" => {
                    return Err(
                        "verify=verify_none is not supported: chime always verifies \
                         the broker's certificate (give its CA with cacertfile)"
                            .to_string(),
                    );
                }
                other => {
                    return Err(format!(
                        "verify={other} is not understood: the only value is verify_peer"
                    ));
                }
            },
            // A server-side option in RabbitMQ's list; it means nothing to a client.
            _ => {}
        }
        Ok(())
    }

    fn into_tls(self, host: &str) -> Result<BrokerTls, String> {
        let identity = match (self.cert_file, self.key_file) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (Some(_), None) => return Err("certfile needs keyfile (the client key)".to_string()),
            (None, Some(_)) => {
                return Err("keyfile needs certfile (the client certificate)".to_string());
            }
        };
        let server_name = self.server_name.unwrap_or_else(|| host.to_string());
        if ServerName::try_from(server_name.as_str()).is_err() {
            return Err(format!(
                "{server_name:?} is not a host name or IP address TLS can verify"
            ));
        }
        Ok(BrokerTls {
            files: TlsFiles {
                ca_file: self.ca_file,
                identity,
            },
            server_name,
        })
    }
}

/// Checks a RabbitMQ URL: `amqp://` or `amqps://`, parseable, TLS options only with
/// `amqps://`, and the CA bundle and client certificate it names readable PEM files.
/// The error never contains a secret of `url`.
pub fn check_amqp_url(url: &str) -> Result<(), String> {
    BrokerUrl::check(url).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_tls_urls() {
        let plain = BrokerUrl::parse("amqp://guest:guest@127.0.0.1:5672/%2f").unwrap();
        assert!(!plain.is_tls());
        assert_eq!(plain.host(), "127.0.0.1");

        let tls = BrokerUrl::parse(
            "amqps://u:pw@mq.example:5671/%2f?cacertfile=%2Fetc%2Fca.pem\
             &certfile=/c.pem&keyfile=/k.pem&heartbeat=10",
        )
        .unwrap();
        assert!(tls.is_tls());
        assert_eq!(tls.uri.query.heartbeat, Some(10));
        let settings = tls.tls.as_ref().unwrap();
        assert_eq!(settings.server_name, "mq.example");
        assert_eq!(settings.files.ca_file, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(
            settings.files.identity,
            Some((PathBuf::from("/c.pem"), PathBuf::from("/k.pem")))
        );

        let sni =
            BrokerUrl::parse("amqps://[::1]:5671/%2f?server_name_indication=mq.internal").unwrap();
        assert_eq!(sni.host(), "::1");
        assert_eq!(sni.tls.unwrap().server_name, "mq.internal");
        // Without options an amqps:// URL trusts the system roots.
        let bare = BrokerUrl::parse("amqps://mq.example/%2f").unwrap();
        assert_eq!(bare.tls.unwrap().files, TlsFiles::default());
    }

    #[test]
    fn tls_options_are_never_ignored() {
        for (url, expect) in [
            ("amqp://u:hunter22@h/%2f?cacertfile=/ca.pem", "use amqps://"),
            (
                "amqps://u:hunter22@h/%2f?certfile=/c.pem",
                "certfile needs keyfile",
            ),
            (
                "amqps://u:hunter22@h/%2f?keyfile=/k.pem",
                "keyfile needs certfile",
            ),
            (
                "amqps://u:hunter22@h/%2f?verify=verify_none",
                "always verifies",
            ),
            (
                "amqps://u:hunter22@h/%2f?server_name_indication=disable",
                "always",
            ),
            ("amqps://u:hunter22@h/%2f?cacertfile=", "needs a file path"),
            ("http://u:hunter22@h/", "not a RabbitMQ URL"),
            ("amqps://u:hunter22@h:port/%2f", "not a valid RabbitMQ URL"),
        ] {
            let err = BrokerUrl::parse(url).unwrap_err();
            assert!(err.contains(expect), "{url}: {err}");
            assert!(!err.contains("hunter22"), "{url}: {err}");
        }
    }

    #[test]
    fn check_reads_the_files_at_start_up() {
        let err = BrokerUrl::check("amqps://u:hunter22@h/%2f?cacertfile=/nonexistent/ca.pem")
            .unwrap_err();
        assert!(
            err.contains("cannot read the CA bundle /nonexistent/ca.pem"),
            "{err}"
        );
        assert!(!err.contains("hunter22"), "{err}");
    }

    #[test]
    fn amqps_is_accepted_and_other_schemes_refused_without_secrets() {
        assert_eq!(
            check_amqp_url("amqp://guest:guest@127.0.0.1:5672/%2f"),
            Ok(())
        );
        assert_eq!(check_amqp_url("amqps://u:topsecret@h:5671/%2f"), Ok(()));
        assert_eq!(check_amqp_url("AMQPS://h"), Ok(()));
        for bad in [
            "http://u:topsecret@h/",
            "amqp://u:topsecret@h:notaport/%2f",
            "guest:topsecret@localhost:5672",
            "amqps://u:topsecret@h/%2f?cacertfile=/no/such/ca.pem",
        ] {
            let err = check_amqp_url(bad).unwrap_err();
            assert!(!err.contains("topsecret"), "{bad}: {err}");
        }
    }
}
