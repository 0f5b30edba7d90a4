//! rustls for `sslmode`: `prefer` and `require` encrypt without verifying
//! (libpq's meaning), `verify-full` checks the chain against `sslrootcert`
//! or the system's roots, and the host name.

use std::sync::Arc;

use rustls::{
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::{ring, verify_tls12_signature, verify_tls13_signature, CryptoProvider},
    pki_types::{
        pem::{self, PemObject},
        CertificateDer, ServerName, UnixTime,
    },
    ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::url::{DatabaseUrl, SslMode};

/// The CA bundle `url`'s server is checked against, read once per
/// connect: the one given with it, else its `sslrootcert` file under this
/// process's rule ([`crate::ca`]); `None` for the system's roots, or when
/// nothing is checked.
pub(crate) async fn root_pem(url: &DatabaseUrl) -> Result<Option<Arc<Vec<u8>>>, String> {
    if url.ssl_mode() != SslMode::VerifyFull {
        return Ok(None);
    }
    if let Some(pem) = url.given_ca() {
        return Ok(Some(pem.clone()));
    }
    match url.root_cert() {
        Some(path) => Ok(Some(Arc::new(crate::ca::read(path).await?))),
        None => Ok(None),
    }
}

/// The TLS set-up of `url`'s `sslmode`, checking the server against `pem`
/// (see [`root_pem`]) or the system's roots.
pub(crate) fn connector(
    url: &DatabaseUrl,
    pem: Option<&[u8]>,
) -> Result<MakeRustlsConnect, String> {
    let provider = Arc::new(ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS set-up: {e}"))?;
    let config = match url.ssl_mode() {
        SslMode::VerifyFull => builder
            .with_root_certificates(roots(url, pem)?)
            .with_no_client_auth(),
        _ => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unverified(provider)))
            .with_no_client_auth(),
    };
    Ok(MakeRustlsConnect::new(config))
}

fn roots(url: &DatabaseUrl, pem: Option<&[u8]>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match pem {
        Some(pem) => {
            let source = match (url.given_ca(), url.root_cert()) {
                (None, Some(path)) => format!("sslrootcert {}", path.display()),
                _ => "the CA bundle given with the URL".to_string(),
            };
            let bad = |what: String| format!("{source}: {what}");
            // Every CERTIFICATE section; other sections (a key, a CRL) are
            // passed over.
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| bad(pem_error(e)))?;
                store.add(cert).map_err(|e| bad(e.to_string()))?;
            }
            if store.is_empty() {
                return Err(format!("{source} holds no certificate"));
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                // A system bundle may hold certificates rustls rejects; the
                // rest are still good roots.
                let _ = store.add(cert);
            }
            if store.is_empty() {
                return Err(
                    "sslmode=verify-full: no system root certificates; set sslrootcert".into(),
                );
            }
        }
    }
    Ok(store)
}

/// What is wrong with a PEM file, on one line. The parser's own words,
/// except that the marker or line it quotes is shown as text, not bytes: a
/// section's label or its BEGIN line, never what the section holds.
fn pem_error(e: pem::Error) -> String {
    match e {
        pem::Error::MissingSectionEnd { end_marker } => format!(
            "section end {:?} missing",
            String::from_utf8_lossy(&end_marker)
        ),
        pem::Error::IllegalSectionStart { line } => format!(
            "illegal section start: {:?}",
            String::from_utf8_lossy(&line)
        ),
        other => other.to_string(),
    }
}

/// libpq's `require`: encrypted, but any certificate is accepted.
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two self-signed CAs (P-256, valid for a hundred years), made by
    /// `openssl req -x509` for these tests only; no key of theirs is kept.
    const CA_1: &str = "-----BEGIN CERTIFICATE-----
MIIBijCCAS+gAwIBAgIUVX5keO3YBiEEkiFl3FIJYvKoozIwCgYIKoZIzj0EAwIw
GTEXMBUGA1UEAwwOb3JjYSB0ZXN0IENBIDEwIBcNMjYxMjA0MDYxNTE4WhgPMjEy
NjExMTAwNjE1MThaMBkxFzAVBgNVBAMMDm9yY2EgdGVzdCBDQSAxMFkwEwYHKoZI
zj0CAQYIKoZIzj0DAQcDQgAEAnd5mYIwAsdZQ/QFI2s1yG57mbLqiNoQNNcMFGwU
mJpXKBZ/16Mf0iquyWzR46x/yUNTDP+KkJWaUJbjffH15KNTMFEwHQYDVR0OBBYE
FLaFj35xsjtXhGjZylub5RzwK/7AMB8GA1UdIwQYMBaAFLaFj35xsjtXhGjZylub
5RzwK/7AMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSQAwRgIhAPt8DFei
5kV3Gv8eDNgtissNdkaW0ZJj3t9PupmYZFQ9AiEA8kXEGY94FSW91aESLLDVwSeR
xd9X3WYqbr3c8bUcGro=
-----END CERTIFICATE-----
";
    const CA_2: &str = "-----BEGIN CERTIFICATE-----
MIIBiTCCAS+gAwIBAgIULxap1wON4neYmgJ5NsNEidWfsTQwCgYIKoZIzj0EAwIw
GTEXMBUGA1UEAwwOb3JjYSB0ZXN0IENBIDIwIBcNMjYxMjA0MDYxNTE4WhgPMjEy
NjExMTAwNjE1MThaMBkxFzAVBgNVBAMMDm9yY2EgdGVzdCBDQSAyMFkwEwYHKoZI
zj0CAQYIKoZIzj0DAQcDQgAEMQ/zzkKrrnSe6gGxUhqRZQHFG3dD/HV7Ea/fQHi2
Wps+jq1eOvu+iFKGIvxWtryMxiT5Ojl5WkC/4gjDd6+P9KNTMFEwHQYDVR0OBBYE
FEdapzu40bXPCJf2I8uUf4nTbsCVMB8GA1UdIwQYMBaAFEdapzu40bXPCJf2I8uU
f4nTbsCVMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIhALiccGFF
4pf6Nl4X5j28/khdO63wwgEG2cZSZUEDpvuLAiAlkbXkYr1RXkPEGhs+GT1gEUSA
J2RbiGiwaTkI5jFINA==
-----END CERTIFICATE-----
";
    /// The second CA's public key: a PEM section that is not a certificate.
    const PUBLIC_KEY: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEMQ/zzkKrrnSe6gGxUhqRZQHFG3dD
/HV7Ea/fQHi2Wps+jq1eOvu+iFKGIvxWtryMxiT5Ojl5WkC/4gjDd6+P9A==
-----END PUBLIC KEY-----
";

    /// `roots` of a URL whose `sslrootcert` is a file holding `pem`.
    fn roots_of(name: &str, pem: &str) -> (Result<RootCertStore, String>, String) {
        let path =
            std::env::temp_dir().join(format!("orca-db-tls-{}-{name}.pem", std::process::id()));
        std::fs::write(&path, pem).unwrap();
        let shown = path.display().to_string();
        let url = DatabaseUrl::parse(&format!(
            "postgres://u@h/d?sslmode=verify-full&sslrootcert={shown}"
        ))
        .unwrap();
        let roots = crate::ca::read_under(&path, &crate::ca::CaFiles::Anywhere)
            .and_then(|pem| roots(&url, Some(&pem)));
        std::fs::remove_file(&path).unwrap();
        (roots, shown)
    }

    #[test]
    fn every_certificate_of_the_file_is_a_root_and_nothing_else() {
        let pem = format!("# the bundle\n{CA_1}{PUBLIC_KEY}\n{CA_2}");
        let (roots, _) = roots_of("bundle", &pem);
        assert_eq!(roots.unwrap().len(), 2);
        // Windows line ends, and no line end after the last.
        let pem = CA_1.replace('\n', "\r\n");
        let (roots, _) = roots_of("crlf", pem.trim_end());
        assert_eq!(roots.unwrap().len(), 1);
    }

    #[test]
    fn a_bad_file_is_one_line_naming_it_and_what_is_wrong() {
        let body = CA_1.lines().nth(1).unwrap();
        let cases = [
            ("empty", String::new(), "holds no certificate"),
            (
                "no-certificate",
                PUBLIC_KEY.to_string(),
                "holds no certificate",
            ),
            (
                "no-end",
                CA_1.replace("-----END CERTIFICATE-----", ""),
                r#": section end "CERTIFICATE" missing"#,
            ),
            (
                "bad-start",
                CA_1.replace("-----BEGIN CERTIFICATE-----", "-----BEGIN CERTIFICATE----"),
                r#": illegal section start: "-----BEGIN CERTIFICATE----""#,
            ),
            (
                "bad-base64",
                CA_1.replacen(body, &body.replace('A', "%"), 1),
                ": base64 decode error",
            ),
            (
                "not-x509",
                "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into(),
                ": invalid peer certificate",
            ),
        ];
        for (name, pem, wanted) in cases {
            let (roots, path) = roots_of(name, &pem);
            let err = roots.err().unwrap_or_else(|| panic!("{name}: accepted"));
            assert!(
                err.starts_with(&format!("sslrootcert {path}")),
                "{name}: {err}"
            );
            assert!(err.contains(wanted), "{name}: {err}");
            assert!(
                !err.contains('\n') && !err.contains('\r'),
                "{name}: {err:?}"
            );
            assert!(
                !err.contains(&body[..16]),
                "{name}: the file's content shown: {err}"
            );
        }
        let missing = std::env::temp_dir().join("orca-db-tls-no-such-file.pem");
        let url = DatabaseUrl::parse(&format!(
            "postgres://u@h/d?sslmode=verify-full&sslrootcert={}",
            missing.display()
        ))
        .unwrap();
        let err = crate::ca::read_under(&missing, &crate::ca::CaFiles::Anywhere)
            .err()
            .unwrap();
        assert!(
            err.starts_with(&format!("sslrootcert {}: ", missing.display())),
            "{err}"
        );
        let _ = url;
    }
}
