//! SASL DIGEST-MD5 (RFC 2831, `qop=auth`, `algorithm=md5-sess`) as BookKeeper's `sasl` auth
//! plugin runs it between a client and a bookie: the mechanism only, both sides, as bytes in
//! and bytes out. It never touches a socket; the bookie's connection and the client's
//! connection carry its tokens in AUTH messages.
//!
//! BookKeeper's fixed names: the service ("protocol") and the server name are both
//! `bookkeeper` (its `SASL_BOOKKEEPER_PROTOCOL` and `SASL_MD5_DUMMY_HOSTNAME`), so the
//! digest-uri is `bookkeeper/bookkeeper` and the realm the bookie offers is `bookkeeper`. The
//! exchange, as the JDK's mechanism runs it under BookKeeper's providers:
//!
//! 1. client → bookie: an empty token (DIGEST-MD5 has no initial response);
//! 2. bookie → client: the challenge (realm, nonce, `qop="auth"`, charset, algorithm);
//! 3. client → bookie: the digest response (username, nonce, cnonce, response, authzid...);
//! 4. bookie → client: `rspauth=...`, proving the bookie knows the password too. The bookie
//!    has authenticated the client once it sends this.
//!
//! Only `qop=auth` is offered and accepted: integrity and confidentiality layers are not
//! (BookKeeper's providers never wrap the connection's bytes; TLS is what protects them).

use std::collections::HashMap;
use std::fmt::Write as _;

use md5::{Digest, Md5};

/// The plugin name both sides put in every AUTH message.
pub const PLUGIN: &str = "sasl";
/// The SASL service (protocol) name, and the server name: `bookkeeper/bookkeeper`.
const DIGEST_URI: &str = "bookkeeper/bookkeeper";
/// The realm the bookie offers: the JDK's server names its realm after the server name.
const REALM: &str = "bookkeeper";
/// The only nonce count of an exchange (no re-authentication on a connection).
const NONCE_COUNT: &str = "00000001";
/// Bytes of randomness in a nonce or cnonce.
const NONCE_BYTES: usize = 24;
/// The largest challenge or response accepted (RFC 2831: 2048 and 4096 bytes).
const MAX_TOKEN: usize = 4096;

/// Why an exchange failed: the peer is not authenticated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("DIGEST-MD5: {0}")]
pub struct SaslError(pub String);

fn fail<T>(why: impl Into<String>) -> Result<T, SaslError> {
    Err(SaslError(why.into()))
}

/// What the bookie accepts: the users (the JAAS section's `user_<name>="password"` options)
/// and the `saslJaasClientAllowedIds` pattern an authenticated name must match whole.
#[derive(Debug)]
pub struct ServerPolicy {
    users: HashMap<String, String>,
    allowed_ids: regex::Regex,
    allowed_ids_source: String,
}

impl ServerPolicy {
    /// Err when `allowed_ids` is not a regular expression.
    pub fn new(users: HashMap<String, String>, allowed_ids: &str) -> Result<Self, String> {
        // Java's Pattern.matcher(id).matches(): the whole id must match.
        let anchored = format!("^(?:{allowed_ids})$");
        let allowed = regex::Regex::new(&anchored)
            .map_err(|e| format!("saslJaasClientAllowedIds {allowed_ids:?}: {e}"))?;
        Ok(ServerPolicy {
            users,
            allowed_ids: allowed,
            allowed_ids_source: allowed_ids.to_string(),
        })
    }
}

/// What one step of the bookie's side gives back.
#[derive(Debug, PartialEq, Eq)]
pub enum ServerStep {
    /// Send this token; the exchange goes on.
    Challenge(Vec<u8>),
    /// Send this token (`rspauth`): the client is authenticated as `user`.
    Authenticated { token: Vec<u8>, user: String },
}

/// The bookie's side of one connection's exchange.
#[derive(Debug, Default)]
pub struct ServerExchange {
    /// The nonce of the challenge sent, once sent.
    nonce: Option<String>,
}

impl ServerExchange {
    /// Takes the client's next token. Err: the client is not authenticated (a wrong password,
    /// an unknown user, an id `saslJaasClientAllowedIds` refuses, a malformed token); the
    /// exchange is over.
    pub fn step(&mut self, policy: &ServerPolicy, token: &[u8]) -> Result<ServerStep, SaslError> {
        match self.nonce.take() {
            None => {
                if !token.is_empty() {
                    return fail("must not have an initial response");
                }
                let nonce = random_token()?;
                let challenge = format!(
                    "realm=\"{REALM}\",nonce=\"{nonce}\",qop=\"auth\",charset=utf-8,\
                     algorithm=md5-sess"
                );
                self.nonce = Some(nonce);
                Ok(ServerStep::Challenge(challenge.into_bytes()))
            }
            Some(nonce) => verify_response(policy, &nonce, token),
        }
    }
}

/// Checks the client's digest response against the nonce sent; the rspauth token and the user.
fn verify_response(
    policy: &ServerPolicy,
    nonce: &str,
    token: &[u8],
) -> Result<ServerStep, SaslError> {
    let d = Directives::parse(token)?;
    let user = d.required("username")?;
    let realm = d.get("realm").unwrap_or("");
    if !realm.is_empty() && realm != REALM {
        return fail(format!("realm {realm:?} is not offered"));
    }
    if d.required("nonce")? != nonce {
        return fail("nonce mismatch");
    }
    if d.required("nc")? != NONCE_COUNT {
        return fail("unexpected nonce count");
    }
    let cnonce = d.required("cnonce")?;
    let qop = d.get("qop").unwrap_or("auth");
    if qop != "auth" {
        return fail(format!("qop {qop:?} is not offered"));
    }
    let uri = d.required("digest-uri")?;
    if uri != DIGEST_URI {
        return fail(format!("digest-uri {uri:?} is not {DIGEST_URI:?}"));
    }
    let authzid = d.get("authzid");
    let Some(password) = policy.users.get(user) else {
        return fail(format!("user {user:?} not found in the JAAS users"));
    };
    let a1 = session_key(user, realm, password, nonce, cnonce, authzid);
    let expected = response_value(&a1, nonce, cnonce, "AUTHENTICATE:", uri);
    if !constant_time_eq(expected.as_bytes(), d.required("response")?.as_bytes()) {
        return fail(format!("wrong password for user {user:?}"));
    }
    // BookKeeper's server callback: the authorization id (authzid, else the user) must be the
    // authentication id, and it must match saslJaasClientAllowedIds.
    if authzid.is_some_and(|z| z != user) {
        return fail(format!("user {user:?} may not act as {authzid:?}"));
    }
    if !policy.allowed_ids.is_match(user) {
        return fail(format!(
            "user {user:?} is not allowed (saslJaasClientAllowedIds={:?})",
            policy.allowed_ids_source
        ));
    }
    let rspauth = response_value(&a1, nonce, cnonce, ":", uri);
    Ok(ServerStep::Authenticated {
        token: format!("rspauth={rspauth}").into_bytes(),
        user: user.to_string(),
    })
}

/// What a client authenticates with: the JAAS client section's `username` and `password`
/// (BookKeeper's DigestLoginModule options).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password, in a log or an error.
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// The client's side of one connection's exchange.
pub struct ClientExchange {
    username: String,
    password: String,
    /// What the bookie's rspauth must be, once the response is sent.
    expected_rspauth: Option<String>,
}

impl std::fmt::Debug for ClientExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientExchange")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl ClientExchange {
    pub fn new(username: &str, password: &str) -> Self {
        ClientExchange {
            username: username.to_string(),
            password: password.to_string(),
            expected_rspauth: None,
        }
    }

    /// The digest response to the bookie's challenge. Err: a challenge this client cannot
    /// answer (no nonce, no `auth` qop, another algorithm).
    pub fn respond(&mut self, challenge: &[u8]) -> Result<Vec<u8>, SaslError> {
        let d = Directives::parse(challenge)?;
        let nonce = d.required("nonce")?;
        if d.get("algorithm") != Some("md5-sess") {
            return fail("the challenge does not ask for algorithm=md5-sess");
        }
        let qops = d.get("qop").unwrap_or("auth");
        if !qops.split(',').any(|q| q.trim() == "auth") {
            return fail(format!("the bookie offers qop {qops:?}, not auth"));
        }
        let realm = d.get("realm").unwrap_or("");
        let cnonce = random_token()?;
        let user = &self.username;
        // As the JDK's client under BookKeeper's provider: the authzid is the username.
        let a1 = session_key(user, realm, &self.password, nonce, &cnonce, Some(user));
        let response = response_value(&a1, nonce, &cnonce, "AUTHENTICATE:", DIGEST_URI);
        self.expected_rspauth = Some(response_value(&a1, nonce, &cnonce, ":", DIGEST_URI));
        let mut out = String::new();
        if d.get("charset") == Some("utf-8") {
            out.push_str("charset=utf-8,");
        }
        let _ = write!(
            out,
            "username=\"{}\",realm=\"{}\",nonce=\"{}\",nc={NONCE_COUNT},cnonce=\"{cnonce}\",\
             digest-uri=\"{DIGEST_URI}\",maxbuf=65536,response={response},qop=auth,\
             authzid=\"{}\"",
            quote(user),
            quote(realm),
            quote(nonce),
            quote(user)
        );
        Ok(out.into_bytes())
    }

    /// Checks the bookie's final token (`rspauth=...`): Err if it is not the one a bookie
    /// knowing the password sends.
    pub fn verify(&self, token: &[u8]) -> Result<(), SaslError> {
        let Some(expected) = self.expected_rspauth.as_deref() else {
            return fail("no response was sent");
        };
        let d = Directives::parse(token)?;
        let got = d.required("rspauth")?;
        if constant_time_eq(got.as_bytes(), expected.as_bytes()) {
            Ok(())
        } else {
            fail("the bookie's rspauth is wrong: it does not know the password")
        }
    }
}

/// `H(H(user:realm:password):nonce:cnonce[:authzid])` of md5-sess, as raw bytes.
fn session_key(
    user: &str,
    realm: &str,
    password: &str,
    nonce: &str,
    cnonce: &str,
    authzid: Option<&str>,
) -> [u8; 16] {
    let inner = Md5::digest(format!("{user}:{realm}:{password}").as_bytes());
    let mut h = Md5::new();
    h.update(inner);
    h.update(format!(":{nonce}:{cnonce}").as_bytes());
    if let Some(z) = authzid {
        h.update(format!(":{z}").as_bytes());
    }
    h.finalize().into()
}

/// The hex digest of a response (`a2_prefix` "AUTHENTICATE:") or of rspauth (":").
fn response_value(a1: &[u8; 16], nonce: &str, cnonce: &str, a2_prefix: &str, uri: &str) -> String {
    let ha2 = hex(&Md5::digest(format!("{a2_prefix}{uri}").as_bytes()));
    let kd = format!("{}:{nonce}:{NONCE_COUNT}:{cnonce}:auth:{ha2}", hex(a1));
    hex(&Md5::digest(kd.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A fresh nonce: random bytes from the OS, as hex (no character needs quoting).
fn random_token() -> Result<String, SaslError> {
    let mut bytes = [0u8; NONCE_BYTES];
    getrandom::getrandom(&mut bytes).map_err(|e| SaslError(format!("no randomness: {e}")))?;
    Ok(hex(&bytes))
}

/// A value written inside double quotes: `"` and `\` escaped.
fn quote(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The `name=value` or `name="quoted value"` list of a challenge or a response. A name given
/// twice keeps its first value (the only repeatable one, realm, is offered once here).
struct Directives(HashMap<String, String>);

impl Directives {
    fn parse(token: &[u8]) -> Result<Self, SaslError> {
        if token.len() > MAX_TOKEN {
            return fail(format!("token of {} bytes is too long", token.len()));
        }
        let Ok(text) = std::str::from_utf8(token) else {
            return fail("token is not UTF-8");
        };
        let mut out = HashMap::new();
        let mut rest = text;
        loop {
            rest = rest.trim_start_matches([' ', '\t', '\r', '\n', ',']);
            if rest.is_empty() {
                break;
            }
            let Some(eq) = rest.find('=') else {
                return fail(format!("malformed directive {rest:?}"));
            };
            let name = rest[..eq].trim().to_ascii_lowercase();
            let (value, after) = directive_value(rest[eq + 1..].trim_start())?;
            out.entry(name).or_insert(value);
            rest = after;
        }
        Ok(Directives(out))
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    fn required(&self, name: &str) -> Result<&str, SaslError> {
        self.get(name)
            .ok_or_else(|| SaslError(format!("missing {name}")))
    }
}

/// One value (quoted or a token) and what follows it.
fn directive_value(s: &str) -> Result<(String, &str), SaslError> {
    if let Some(quoted) = s.strip_prefix('"') {
        let mut value = String::new();
        let mut chars = quoted.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, escaped)) => value.push(escaped),
                    None => break,
                },
                '"' => return Ok((value, &quoted[i + 1..])),
                _ => value.push(c),
            }
        }
        return fail("unterminated quoted value");
    }
    let end = s.find(',').unwrap_or(s.len());
    Ok((s[..end].trim().to_string(), &s[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allowed: &str) -> ServerPolicy {
        let users = HashMap::from([
            ("bookkeeper-client".to_string(), "s3cret".to_string()),
            ("other".to_string(), "pw".to_string()),
        ]);
        ServerPolicy::new(users, allowed).unwrap()
    }

    /// Runs the four messages; the bookie's verdict and, when authenticated, the client's.
    fn exchange(p: &ServerPolicy, user: &str, password: &str) -> Result<String, SaslError> {
        let mut server = ServerExchange::default();
        let mut client = ClientExchange::new(user, password);
        let ServerStep::Challenge(challenge) = server.step(p, b"")? else {
            panic!("first step is a challenge");
        };
        let response = client.respond(&challenge)?;
        match server.step(p, &response)? {
            ServerStep::Authenticated { token, user } => {
                client.verify(&token)?;
                Ok(user)
            }
            ServerStep::Challenge(_) => panic!("second step authenticates"),
        }
    }

    #[test]
    fn the_right_password_authenticates_both_ways() {
        let p = policy(".*bookkeeper.*");
        assert_eq!(
            exchange(&p, "bookkeeper-client", "s3cret").unwrap(),
            "bookkeeper-client"
        );
    }

    #[test]
    fn a_wrong_password_an_unknown_user_or_a_refused_id_fail() {
        let p = policy(".*bookkeeper.*");
        assert!(exchange(&p, "bookkeeper-client", "nope").is_err());
        assert!(exchange(&p, "bookkeeper-nobody", "s3cret").is_err());
        let err = exchange(&p, "other", "pw").unwrap_err();
        assert!(err.0.contains("saslJaasClientAllowedIds"), "{err}");
        // The pattern must match the whole id, as Java's matches() does.
        assert!(exchange(&policy("bookkeeper"), "bookkeeper-client", "s3cret").is_err());
    }

    #[test]
    fn an_initial_response_and_a_forged_rspauth_are_refused() {
        let p = policy(".*");
        assert!(ServerExchange::default().step(&p, b"x").is_err());
        let mut client = ClientExchange::new("other", "pw");
        let mut server = ServerExchange::default();
        let ServerStep::Challenge(c) = server.step(&p, b"").unwrap() else {
            panic!()
        };
        client.respond(&c).unwrap();
        assert!(client
            .verify(b"rspauth=00000000000000000000000000000000")
            .is_err());
    }

    /// RFC 2831's example (section 4), with no authzid and qop=auth: the response digest.
    #[test]
    fn the_digest_is_rfc_2831s() {
        let a1 = session_key(
            "chris",
            "elwood.innosoft.com",
            "secret",
            "OA6MG9tEQGm2hh",
            "OA6MHXh6VqTrRk",
            None,
        );
        let uri = "imap/elwood.innosoft.com";
        let response = response_value(
            &a1,
            "OA6MG9tEQGm2hh",
            "OA6MHXh6VqTrRk",
            "AUTHENTICATE:",
            uri,
        );
        assert_eq!(response, "d388dad90d4bbd760a152321f2143af7");
        let rspauth = response_value(&a1, "OA6MG9tEQGm2hh", "OA6MHXh6VqTrRk", ":", uri);
        assert_eq!(rspauth, "ea40f60335c427b5527b84dbabcdfffd");
    }

    #[test]
    fn directives_parse_quotes_escapes_and_tokens() {
        let d =
            Directives::parse(br#"realm="a\"b",nonce="n, 1" , qop=auth,charset=utf-8"#).unwrap();
        assert_eq!(d.get("realm"), Some("a\"b"));
        assert_eq!(d.get("nonce"), Some("n, 1"));
        assert_eq!(d.get("qop"), Some("auth"));
        assert_eq!(d.get("charset"), Some("utf-8"));
        assert!(Directives::parse(b"realm=\"open").is_err());
        assert!(Directives::parse(b"novalue").is_err());
    }
}
