//! TLS for client connections (PostgreSQL's `ssl = on` with `ssl_cert_file` and
//! `ssl_key_file`): a certificate chain and its private key in PEM files, served through
//! pgwire's SSLRequest negotiation on rustls (ring). A client that asks for TLS gets it; one
//! that does not stays in plain text, as with PostgreSQL's `host` lines in `pg_hba.conf`.
//! Without the files, an SSLRequest is answered `N` and the client goes on in plain text (or
//! gives up, with `sslmode=require`).

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;

use crate::error::SqlError;

/// The acceptor for a certificate chain and key in PEM files (`settle serve --ssl-cert-file F
/// --ssl-key-file K`). Errors name the file and what is wrong with it.
pub fn acceptor(cert_file: &Path, key_file: &Path) -> Result<TlsAcceptor, SqlError> {
    let bad = |file: &Path, what: String| SqlError::new("F0000", format!("{}: {what}", file.display()));
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_file)
        .map_err(|e| bad(cert_file, format!("could not read the certificate: {e}")))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad(cert_file, format!("could not parse the certificate: {e}")))?;
    if certs.is_empty() {
        return Err(bad(cert_file, "no certificate in the file".into()));
    }
    let key = PrivateKeyDer::from_pem_file(key_file)
        .map_err(|e| bad(key_file, format!("could not read a private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| SqlError::new("F0000", format!("TLS configuration: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| bad(key_file, format!("the key does not go with the certificate: {e}")))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}
