//! A throwaway certificate authority for TLS tests: a CA, server certificates for given
//! host names and client certificates for given common names, written as PEM files into a
//! directory the test owns (keys with mode 0600, which PostgreSQL insists on).
//!
//! Every test that talks to a real TLS server (a private RabbitMQ node with a TLS
//! listener, a private PostgreSQL with `ssl = on`, `chimed`'s HTTPS API) makes its
//! certificates here, so no test ships a key and none expires.

use std::{
    fs,
    path::{Path, PathBuf},
};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A certificate and its key, as written to disk.
#[derive(Debug, Clone)]
pub struct PemPair {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// The private key (PKCS#8 PEM, mode 0600).
    pub key: PathBuf,
}

/// A test certificate authority writing into one directory.
#[derive(Debug)]
pub struct TestCa {
    dir: PathBuf,
    name: String,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    /// A new CA called `name` whose files go to `dir` (created if missing); its certificate
    /// is written to `dir/<name>.crt`.
    pub fn new(dir: impl AsRef<Path>, name: &str) -> Self {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).expect("create the certificate directory");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("Chime test CA {name}"));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("CA key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("self-signed CA");
        let ca = Self {
            dir,
            name: name.to_string(),
            issuer,
        };
        fs::write(ca.ca_cert(), ca.issuer.pem()).expect("write the CA certificate");
        ca
    }

    /// The CA certificate's file (the bundle a client trusts).
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join(format!("{}.crt", self.name))
    }

    /// A server certificate for `hosts` (DNS names or IP addresses), written as
    /// `<file_stem>.crt` and `<file_stem>.key`.
    pub fn server(&self, file_stem: &str, hosts: &[&str]) -> PemPair {
        let names: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("server params");
        params.distinguished_name.push(
            DnType::CommonName,
            hosts.first().copied().unwrap_or("server"),
        );
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(file_stem, params)
    }

    /// A client certificate whose subject common name is `common_name` (RabbitMQ and
    /// PostgreSQL map it to a user name), written as `<file_stem>.crt` and `.key`.
    pub fn client(&self, file_stem: &str, common_name: &str) -> PemPair {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("client params");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(file_stem, params)
    }

    fn issue(&self, file_stem: &str, mut params: CertificateParams) -> PemPair {
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        let pair = PemPair {
            cert: self.dir.join(format!("{file_stem}.crt")),
            key: self.dir.join(format!("{file_stem}.key")),
        };
        fs::write(&pair.cert, cert.pem()).expect("write the certificate");
        write_private(&pair.key, &key.serialize_pem());
        pair
    }
}

/// Writes `contents` to `path` readable by its owner only.
fn write_private(path: &Path, contents: &str) {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let _ = fs::remove_file(path);
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true).mode(0o600);
    let mut file = options.open(path).expect("create the key file");
    std::io::Write::write_all(&mut file, contents.as_bytes()).expect("write the key");
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).expect("chmod 0600");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_ca_a_server_and_a_client_pair() {
        let dir = std::env::temp_dir().join(format!("chime-certs-{}", uuid::Uuid::now_v7()));
        let ca = TestCa::new(&dir, "ca");
        let server = ca.server("server", &["localhost", "127.0.0.1"]);
        let client = ca.client("client", "app-a");
        for file in [ca.ca_cert(), server.cert.clone(), client.cert.clone()] {
            let text = fs::read_to_string(&file).unwrap();
            assert!(text.starts_with("-----BEGIN CERTIFICATE-----"), "{file:?}");
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&server.key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(
            fs::read_to_string(&client.key)
                .unwrap()
                .contains("PRIVATE KEY")
        );
        fs::remove_dir_all(dir).unwrap();
    }
}
