//! TLS settings turned into rustls configurations: the bookie's side of START_TLS (its key and
//! chain, and the roots a client certificate must chain to when one is required), with the
//! protocol versions and cipher suites BookKeeper's `tlsEnabledProtocols` and
//! `tlsEnabledCipherSuites` name. The key material arrives as DER bytes: reading key stores
//! (PEM, PKCS12, JKS) and their passwords is the control plane's job. It never touches a socket.

use std::fmt;
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, SupportedCipherSuite, SupportedProtocolVersion};
use tokio_rustls::TlsAcceptor;

/// A TLS configuration that cannot be used, named by BookKeeper's key where one is at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{0}")]
    Settings(String),
    #[error("the key or certificate chain: {0}")]
    Certificate(#[from] rustls::Error),
}

/// What the bookie's TLS needs, already read from its stores.
#[derive(Clone, Default)]
pub struct ServerTlsSettings {
    /// The bookie's certificate chain (DER), its own certificate first.
    pub chain: Vec<Vec<u8>>,
    /// Its private key, PKCS#8 DER.
    pub key_pkcs8: Vec<u8>,
    /// With `tlsClientAuthentication`: the certificates (DER) a client certificate must chain
    /// to; a client without one is refused. None: no client certificate asked for.
    pub client_roots: Option<Vec<Vec<u8>>>,
    /// `tlsEnabledProtocols` (`TLSv1.2`, `TLSv1.3`); empty: both.
    pub protocols: Vec<String>,
    /// `tlsEnabledCipherSuites` by their standard names; empty: the provider's defaults.
    pub cipher_suites: Vec<String>,
}

/// The standard name of a suite, as Java names it (`TLS_AES_128_GCM_SHA256`,
/// `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`).
fn suite_name(suite: &SupportedCipherSuite) -> String {
    format!("{:?}", suite.suite()).replacen("TLS13_", "TLS_", 1)
}

/// The crypto provider limited to `names` (none: all of its suites).
fn provider(names: &[String]) -> Result<CryptoProvider, TlsError> {
    let mut provider = rustls::crypto::ring::default_provider();
    if names.is_empty() {
        return Ok(provider);
    }
    let mut chosen = Vec::with_capacity(names.len());
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        match provider
            .cipher_suites
            .iter()
            .find(|s| suite_name(s) == name)
        {
            Some(suite) => chosen.push(*suite),
            None => {
                let known: Vec<String> = provider.cipher_suites.iter().map(suite_name).collect();
                return Err(TlsError::Settings(format!(
                    "tlsEnabledCipherSuites: {name} is not supported (supported: {})",
                    known.join(", ")
                )));
            }
        }
    }
    provider.cipher_suites = chosen;
    Ok(provider)
}

/// The protocol versions `names` ask for (none: TLS 1.2 and 1.3).
fn versions(names: &[String]) -> Result<Vec<&'static SupportedProtocolVersion>, TlsError> {
    let mut out = Vec::new();
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        let version = match name {
            "TLSv1.2" => &rustls::version::TLS12,
            "TLSv1.3" => &rustls::version::TLS13,
            other => {
                return Err(TlsError::Settings(format!(
                    "tlsEnabledProtocols: {other} is not supported (TLSv1.2, TLSv1.3)"
                )))
            }
        };
        out.push(version);
    }
    if out.is_empty() {
        out.extend_from_slice(rustls::ALL_VERSIONS);
    }
    Ok(out)
}

fn certificates(ders: &[Vec<u8>]) -> Vec<CertificateDer<'static>> {
    ders.iter()
        .map(|der| CertificateDer::from(der.clone()))
        .collect()
}

/// The rustls server configuration of `settings`.
pub fn server_config(settings: &ServerTlsSettings) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    if settings.chain.is_empty() {
        return Err(TlsError::Settings("no certificate for the bookie".into()));
    }
    let provider = Arc::new(provider(&settings.cipher_suites)?);
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions(&settings.protocols)?)?;
    let chain = certificates(&settings.chain);
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(settings.key_pkcs8.clone()));
    let config = match &settings.client_roots {
        None => builder.with_no_client_auth().with_single_cert(chain, key)?,
        Some(roots) => {
            let mut store = RootCertStore::empty();
            for root in certificates(roots) {
                store.add(root).map_err(|e| {
                    TlsError::Settings(format!("tlsTrustStore: a certificate is unusable: {e}"))
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider)
                .build()
                .map_err(|e| TlsError::Settings(format!("tlsTrustStore: {e}")))?;
            builder
                .with_client_cert_verifier(verifier)
                .with_single_cert(chain, key)?
        }
    };
    Ok(Arc::new(config))
}

/// The bookie's TLS: the acceptor every START_TLS uses, replaced whole when the stores change
/// (`tlsCertFilesRefreshDurationSeconds`); a handshake in progress keeps the one it began with.
pub struct ServerTls {
    acceptor: RwLock<TlsAcceptor>,
}

impl ServerTls {
    /// Checks `settings` and builds the acceptor; a bad key, chain, root, protocol or suite is
    /// an error here, before the bookie listens.
    pub fn new(settings: &ServerTlsSettings) -> Result<ServerTls, TlsError> {
        Ok(ServerTls {
            acceptor: RwLock::new(TlsAcceptor::from(server_config(settings)?)),
        })
    }

    /// Replaces the acceptor for the handshakes that start from now on; on error the current
    /// one stays.
    pub fn reload(&self, settings: &ServerTlsSettings) -> Result<(), TlsError> {
        let fresh = TlsAcceptor::from(server_config(settings)?);
        *self.acceptor.write() = fresh;
        Ok(())
    }

    /// The acceptor for a handshake starting now.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.read().clone()
    }
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServerTls")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_and_suites_are_named_as_java_names_them() {
        assert_eq!(versions(&[]).unwrap().len(), 2);
        assert_eq!(versions(&["TLSv1.3".into()]).unwrap().len(), 1);
        let err = versions(&["TLSv1.1".into()]).unwrap_err().to_string();
        assert!(err.contains("tlsEnabledProtocols: TLSv1.1"), "{err}");
        let p = provider(&[
            "TLS_AES_128_GCM_SHA256".into(),
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into(),
        ])
        .unwrap();
        assert_eq!(p.cipher_suites.len(), 2);
        let err = provider(&["TLS_RSA_WITH_NULL_SHA".into()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("TLS_RSA_WITH_NULL_SHA is not supported"),
            "{err}"
        );
    }

    #[test]
    fn a_server_without_a_usable_key_is_refused() {
        let none = ServerTlsSettings::default();
        assert!(ServerTls::new(&none).is_err());
        let garbage = ServerTlsSettings {
            chain: vec![b"not a certificate".to_vec()],
            key_pkcs8: b"not a key".to_vec(),
            ..ServerTlsSettings::default()
        };
        assert!(ServerTls::new(&garbage).is_err());
    }
}
