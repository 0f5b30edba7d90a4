//! rustls for `sslmode`: `prefer` and `require` encrypt without verifying
//! (libpq's meaning), `verify-full` checks the chain against `sslrootcert`
//! or the system's roots, and the host name.

use std::sync::Arc;

use rustls::{
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::{ring, verify_tls12_signature, verify_tls13_signature, CryptoProvider},
    pki_types::{CertificateDer, ServerName, UnixTime},
    ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::url::{DatabaseUrl, SslMode};

pub(crate) fn connector(url: &DatabaseUrl) -> Result<MakeRustlsConnect, String> {
    let provider = Arc::new(ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS set-up: {e}"))?;
    let config = match url.ssl_mode {
        SslMode::VerifyFull => builder
            .with_root_certificates(roots(url)?)
            .with_no_client_auth(),
        _ => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unverified(provider)))
            .with_no_client_auth(),
    };
    Ok(MakeRustlsConnect::new(config))
}

fn roots(url: &DatabaseUrl) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match &url.root_cert {
        Some(path) => {
            let pem =
                std::fs::read(path).map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
            for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
                let cert = cert.map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
                store
                    .add(cert)
                    .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
            }
            if store.is_empty() {
                return Err(format!(
                    "sslrootcert {} holds no certificate",
                    path.display()
                ));
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
