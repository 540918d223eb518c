//! Who may use a connection, as BookKeeper's bookie decides it: with an authorization provider
//! (`BookieAuthZFactory`, `authorizedRoles`) a connection starts unauthenticated and becomes
//! authenticated when its TLS handshake shows a client certificate whose first role is
//! authorized; with SASL (`SASLBookieAuthProviderFactory`) it becomes authenticated when its
//! DIGEST-MD5 exchange, carried in AUTH messages of the plugin `sasl`, succeeds. Until then
//! BookKeeper's AuthHandler answers (V2 ADD and READ: EUA, other V2 requests: the connection
//! closes; V3: EUA, START_TLS passes). Without a provider every connection is authenticated at
//! once (BookKeeper's AuthDisabledPlugin). It decides; it never writes a socket.

use std::sync::atomic::Ordering;

use super::outbox::Outbox;
use crate::sasl::{ServerExchange, ServerStep, PLUGIN as SASL_PLUGIN};

/// `BookieAuthZFactory`'s plugin name: an AUTH message naming it is taken (and, as in
/// BookKeeper, never answered: the provider authenticates on the TLS handshake alone).
pub(super) const AUTHZ_PLUGIN: &str = "BookieAuthZFactory";

/// The roles of a certificate (DER) as BookKeeper's CertUtils reads them from its subject's
/// organisational unit: `0:role1,role2;1:cluster` gives `[role1, role2]`. Empty when the
/// certificate has no OU or no role code.
pub(super) fn certificate_roles(der: &[u8]) -> Vec<String> {
    let Some(ou) = subject_ou(der) else {
        return Vec::new();
    };
    for part in ou.split(';') {
        let Some((code, names)) = part.split_once(':') else {
            continue;
        };
        // BookKeeper matches `^([0-9]+):(.*)$` per part and takes the role code "0".
        if code == "0" {
            return names.split(',').map(|n| n.trim().to_string()).collect();
        }
    }
    Vec::new()
}

/// Whether a client presenting `chain` (its own certificate first) may use the bookie: its
/// first role is one of `authorized`, as BookieAuthZFactory compares them. Err says why not.
pub(super) fn authorize(
    chain: Option<&[Vec<u8>]>,
    authorized: &[String],
) -> Result<String, String> {
    let Some(first) = chain.and_then(|c| c.first()) else {
        return Err("certificate missing".into());
    };
    let roles = certificate_roles(first);
    let Some(role) = roles.first() else {
        return Err(format!(
            "no cert role in OU field of certificate; must have a role from {authorized:?}"
        ));
    };
    if authorized.iter().any(|a| a == role) {
        Ok(role.clone())
    } else {
        Err(format!(
            "cert role {roles:?} doesn't match authorizedRoles {authorized:?}"
        ))
    }
}

/// Whether an AUTH message of `plugin` is one of the connection's SASL exchange.
pub(super) fn is_sasl(outbox: &Outbox, plugin: &str) -> bool {
    outbox.state().cfg.sasl.is_some() && plugin == SASL_PLUGIN
}

/// One SASL token of a connection not authenticated yet: the token to answer with (the
/// connection is authenticated once the last one is sent), or why the client is refused.
pub(super) fn sasl_step(
    exchange: &mut ServerExchange,
    outbox: &Outbox,
    token: &[u8],
) -> Result<Vec<u8>, String> {
    let state = outbox.state();
    state.stats.auth_requests.inc();
    let Some(policy) = state.cfg.sasl.as_deref() else {
        return Err("SASL is not configured".into());
    };
    match exchange.step(policy, token) {
        Ok(ServerStep::Challenge(token)) => Ok(token),
        Ok(ServerStep::Authenticated { token, user }) => {
            // Set before the answer is queued: the reader serves the client's next frame only
            // after this one, and the answer is what lets the client send it.
            outbox.usage.authenticated.store(true, Ordering::Release);
            log::info!("SASL: client authenticated as {user:?}");
            Ok(token)
        }
        Err(e) => {
            state.stats.authentication_failures.inc();
            log::error!("SASL: client refused: {e}");
            Err(e.to_string())
        }
    }
}

// --- just enough DER to find the subject's OU of an X.509 certificate -------------------------

/// The OID 2.5.4.11 (organizationalUnitName), DER-encoded with its tag and length.
const OU_OID: [u8; 5] = [0x06, 0x03, 0x55, 0x04, 0x0b];

/// One DER element: (tag, content, the rest after it).
fn element(data: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *data.first()?;
    let first = *data.get(1)? as usize;
    let (len, start) = if first < 0x80 {
        (first, 2)
    } else {
        let n = first & 0x7f;
        if n == 0 || n > 4 {
            return None;
        }
        let bytes = data.get(2..2 + n)?;
        (
            bytes.iter().fold(0usize, |acc, b| acc << 8 | *b as usize),
            2 + n,
        )
    };
    let content = data.get(start..start.checked_add(len)?)?;
    Some((tag, content, &data[start + len..]))
}

/// The first OU value of the certificate's subject (as BookKeeper takes the first OU RDN).
fn subject_ou(der: &[u8]) -> Option<String> {
    let (_, cert, _) = element(der)?;
    let (_, tbs, _) = element(cert)?;
    let mut rest = tbs;
    let (tag, _, after) = element(rest)?;
    if tag == 0xa0 {
        rest = after; // the explicit version
    }
    // serial, signature algorithm, issuer, validity, then the subject.
    for _ in 0..4 {
        rest = element(rest)?.2;
    }
    let (_, mut subject, _) = element(rest)?;
    while !subject.is_empty() {
        let (_, set, next) = element(subject)?;
        subject = next;
        let (_, pair, _) = element(set)?;
        if pair.starts_with(&OU_OID) {
            let (_, value, _) = element(&pair[OU_OID.len()..])?;
            return Some(String::from_utf8_lossy(value).into_owned());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DER of a SEQUENCE/SET/... with `content`.
    fn der(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        if content.len() < 0x80 {
            out.push(content.len() as u8);
        } else {
            out.extend_from_slice(&[0x82, (content.len() >> 8) as u8, content.len() as u8]);
        }
        out.extend_from_slice(content);
        out
    }

    fn certificate_with_subject(rdns: &[(&[u8], &str)]) -> Vec<u8> {
        let mut subject = Vec::new();
        for (oid, value) in rdns {
            let mut pair = der(0x06, oid);
            pair.extend(der(0x0c, value.as_bytes()));
            subject.extend(der(0x31, &der(0x30, &pair)));
        }
        let mut tbs = der(0xa0, &der(0x02, &[2]));
        tbs.extend(der(0x02, &[1])); // serial
        tbs.extend(der(0x30, &[])); // signature algorithm
        tbs.extend(der(0x30, &[])); // issuer
        tbs.extend(der(0x30, &[])); // validity
        tbs.extend(der(0x30, &subject));
        tbs.extend(der(0x30, &[])); // subject public key info
        der(0x30, &der(0x30, &tbs))
    }

    const CN: &[u8] = &[0x55, 0x04, 0x03];
    const OU: &[u8] = &[0x55, 0x04, 0x0b];

    #[test]
    fn roles_are_read_from_the_subject_ou_as_bookkeeper_reads_them() {
        let cert = certificate_with_subject(&[(CN, "client"), (OU, "0:writer, reader;1:c1")]);
        assert_eq!(certificate_roles(&cert), vec!["writer", "reader"]);
        let no_role = certificate_with_subject(&[(OU, "1:c1")]);
        assert!(certificate_roles(&no_role).is_empty());
        let no_ou = certificate_with_subject(&[(CN, "client")]);
        assert!(certificate_roles(&no_ou).is_empty());
        assert!(certificate_roles(b"garbage").is_empty());
    }

    #[test]
    fn only_the_first_role_is_compared() {
        let allowed = vec!["reader".to_string()];
        let cert = certificate_with_subject(&[(OU, "0:writer,reader")]);
        assert!(authorize(Some(&[cert]), &allowed).is_err());
        let cert = certificate_with_subject(&[(OU, "0:reader,writer")]);
        assert_eq!(authorize(Some(&[cert]), &allowed).unwrap(), "reader");
        assert!(authorize(None, &allowed).is_err());
    }
}
