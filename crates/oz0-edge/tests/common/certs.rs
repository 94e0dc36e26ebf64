//! A certificate authority of the test's own, made at run time (rcgen), and
//! the certificates the edge's TLS tests serve: valid, expired, for another
//! name. Its files are written into a folder of the test's, the keys 0600.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// A CA: its certificate in `ca` (PEM), and what it signs.
pub struct TestCa {
    pub ca: PathBuf,
    dir: PathBuf,
    issuer: Issuer<'static, KeyPair>,
}

fn write_private(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

impl TestCa {
    /// A new CA named `name`, its certificate at `dir/<name>-ca.pem`.
    pub fn new(dir: &Path, name: &str) -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(DnType::CommonName, format!("oz0 test CA {name}"));
        let cert = p.self_signed(&key).unwrap();
        let ca = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&ca, cert.pem()).unwrap();
        TestCa {
            ca,
            dir: dir.to_path_buf(),
            issuer: Issuer::new(p, key),
        }
    }

    /// A server certificate for `names` (DNS names or IP addresses), valid
    /// until `until` (year, month, day) or for a year; its chain and key
    /// at `dir/<stem>.crt` and `dir/<stem>.key` (0600).
    pub fn leaf(
        &self,
        stem: &str,
        names: &[&str],
        until: Option<(i32, u8, u8)>,
    ) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
        p.distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or("edge"));
        if let Some((y, m, d)) = until {
            p.not_before = rcgen::date_time_ymd(y - 1, m, d);
            p.not_after = rcgen::date_time_ymd(y, m, d);
        }
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        let (c, k) = (
            self.dir.join(format!("{stem}.crt")),
            self.dir.join(format!("{stem}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        write_private(&k, &key.serialize_pem());
        (c, k)
    }
}
