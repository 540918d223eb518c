//! TLS settings turned into rustls configurations: the bookie's side of START_TLS (its key and
//! chain, and the roots a client certificate must chain to when one is required) and the
//! client's (the roots a bookie's chain must reach, its own certificate when asked, host-name
//! checks on or off), with the protocol versions and cipher suites BookKeeper's
//! `tlsEnabledProtocols` and `tlsEnabledCipherSuites` name. The key material arrives as DER bytes: reading key stores
//! (PEM, PKCS12, JKS) and their passwords is the control plane's job. It never touches a socket.

use std::fmt;
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme, SupportedCipherSuite,
    SupportedProtocolVersion,
};
use tokio_rustls::{TlsAcceptor, TlsConnector};

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

/// The root store of `ders`; `key` names the configuration key in errors.
fn root_store(ders: &[Vec<u8>], key: &str) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for root in certificates(ders) {
        store
            .add(root)
            .map_err(|e| TlsError::Settings(format!("{key}: a certificate is unusable: {e}")))?;
    }
    Ok(store)
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
        None => builder
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(explain)?,
        Some(roots) => {
            let store = root_store(roots, "tlsTrustStore")?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider)
                .build()
                .map_err(|e| TlsError::Settings(format!("tlsTrustStore: {e}")))?;
            builder
                .with_client_cert_verifier(verifier)
                .with_single_cert(chain, key)
                .map_err(explain)?
        }
    };
    Ok(Arc::new(config))
}

/// The bookie's own key or chain refused, said for an operator: an X.509 version 1 certificate
/// (what `openssl x509 -req` makes without extensions) is the usual cause.
fn explain(e: rustls::Error) -> TlsError {
    let text = e.to_string();
    let hint = if text.contains("UnsupportedCertVersion") {
        ": an X.509 v3 certificate is required (openssl makes v3 when given extensions, \
         e.g. -extfile with subjectAltName)"
    } else {
        ""
    };
    TlsError::Settings(format!(
        "tlsKeyStore/tlsCertificatePath: the bookie's key or certificate cannot be used: \
         {text}{hint}"
    ))
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

/// What a client's TLS needs, already read from its stores.
#[derive(Clone, Default)]
pub struct ClientTlsSettings {
    /// The certificates (DER) a bookie's chain must reach (`clientTrustStore`, else
    /// `tlsTrustStore`).
    pub roots: Vec<Vec<u8>>,
    /// With `tlsClientAuthentication`: the client's chain and PKCS#8 key.
    pub identity: Option<(Vec<Vec<u8>>, Vec<u8>)>,
    /// `tlsHostnameVerificationEnabled`: the bookie's certificate must name the host dialled.
    /// Off (BookKeeper's default): the chain is still verified, the name is not.
    pub verify_hostname: bool,
    pub protocols: Vec<String>,
    pub cipher_suites: Vec<String>,
}

/// Verifies a bookie's chain against the roots and, unless asked, not its name (BookKeeper's
/// client checks the name only with `tlsHostnameVerificationEnabled`).
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The client's TLS: the connector every connection's START_TLS uses.
pub struct ClientTls {
    connector: TlsConnector,
}

impl ClientTls {
    /// Checks `settings` and builds the connector. A client without roots is refused: the
    /// bookie's chain is always verified.
    pub fn new(settings: &ClientTlsSettings) -> Result<ClientTls, TlsError> {
        if settings.roots.is_empty() {
            return Err(TlsError::Settings(
                "clientTrustStore (or tlsTrustStore): no certificate to verify bookies with".into(),
            ));
        }
        let provider = Arc::new(provider(&settings.cipher_suites)?);
        let roots = Arc::new(root_store(&settings.roots, "clientTrustStore")?);
        let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| TlsError::Settings(format!("clientTrustStore: {e}")))?;
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&versions(&settings.protocols)?)?;
        let builder = if settings.verify_hostname {
            builder.with_webpki_verifier(webpki)
        } else {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly(webpki)))
        };
        let config = match &settings.identity {
            None => builder.with_no_client_auth(),
            Some((chain, key)) => builder.with_client_auth_cert(
                certificates(chain),
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.clone())),
            )?,
        };
        Ok(ClientTls {
            connector: TlsConnector::from(Arc::new(config)),
        })
    }

    pub fn connector(&self) -> &TlsConnector {
        &self.connector
    }

    /// The name a bookie at `address` (`host:port`) is checked against.
    pub fn server_name(address: &str) -> Result<ServerName<'static>, TlsError> {
        let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        ServerName::try_from(host.to_string())
            .map_err(|e| TlsError::Settings(format!("bookie address {address}: {e}")))
    }
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientTls")
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
