//! SASL DIGEST-MD5 between the client's connections and a real server on loopback: the right
//! credentials are served over V2 and V3, wrong ones, an unknown user or an id the bookie does
//! not allow fail at once with EUA and write nothing, a client without credentials is answered
//! EUA, and credentials given to a bookie without authentication are simply not needed.

use std::collections::HashMap;
use std::sync::Arc;

use super::*;
use crate::digest::{master_key, DigestManager, DigestType};
use crate::protocol::Status;
use crate::sasl::{Credentials, ServerPolicy};
use crate::testing::{client_config, server_config, test_bookie, test_bookie_with, TestBookie};

fn sasl_bookie(dir: &std::path::Path, allowed_ids: &str) -> TestBookie {
    let users = HashMap::from([
        ("bookkeeper-app".to_string(), "s3cret".to_string()),
        ("intruder".to_string(), "pw".to_string()),
    ]);
    let cfg = crate::config::ServerConfig {
        sasl: Some(Arc::new(ServerPolicy::new(users, allowed_ids).unwrap())),
        ..server_config()
    };
    test_bookie_with(dir, cfg)
}

fn client(v2: bool, user: Option<(&str, &str)>) -> BookieClient {
    BookieClient::new(ClientConfig {
        use_v2_wire_protocol: v2,
        sasl: user.map(|(u, p)| Credentials {
            username: u.into(),
            password: p.into(),
        }),
        ..client_config()
    })
}

fn add(client: &BookieClient, bookie: &str, entry: i64) -> ReplyResult {
    let key = Bytes::copy_from_slice(&master_key(b"pw"));
    let dm = DigestManager::new(9, b"pw", DigestType::Crc32c);
    let (done, waiter) = crate::done::blocking();
    let body = dm.package(entry, -1, 5, b"hello");
    client.send(client.add_request(bookie, 9, entry, key, body, 0), done);
    waiter.wait().unwrap_or(Err(ClientError::Closed))
}

fn refused(result: &ReplyResult) -> bool {
    matches!(
        result,
        Err(ClientError::Bookie {
            status: Status::Unauthorized,
            ..
        })
    )
}

#[test]
fn the_right_credentials_are_served_over_v2_and_v3() {
    let dir = tempfile::tempdir().unwrap();
    let (_storage, server) = sasl_bookie(dir.path(), ".*bookkeeper.*");
    let addr = server.local_addr().to_string();
    for (entry, v2) in [(0, true), (1, false)] {
        let c = client(v2, Some(("bookkeeper-app", "s3cret")));
        assert_eq!(add(&c, &addr, entry), Ok(Reply::Added), "v2={v2}");
    }
}

#[test]
fn wrong_credentials_an_unknown_user_and_a_refused_id_get_eua() {
    let dir = tempfile::tempdir().unwrap();
    let (_storage, server) = sasl_bookie(dir.path(), ".*bookkeeper.*");
    let addr = server.local_addr().to_string();
    for v2 in [true, false] {
        for user in [
            ("bookkeeper-app", "wrong"),
            ("bookkeeper-nobody", "s3cret"),
            ("intruder", "pw"),
        ] {
            let result = add(&client(v2, Some(user)), &addr, 0);
            assert!(refused(&result), "v2={v2} {user:?}: {result:?}");
        }
        // No credentials at all: the bookie answers the request itself EUA.
        let result = add(&client(v2, None), &addr, 0);
        assert!(refused(&result), "v2={v2} anonymous: {result:?}");
    }
    let reader = client(true, Some(("bookkeeper-app", "s3cret")));
    let (done, waiter) = crate::done::blocking();
    reader.send(reader.read_request(&addr, 9, 0, 0, None), done);
    let read = waiter.wait().unwrap_or(Err(ClientError::Closed));
    assert!(
        matches!(
            read,
            Err(ClientError::Bookie {
                status: Status::NoLedger | Status::NoEntry,
                ..
            })
        ),
        "an entry was written: {read:?}"
    );
}

#[test]
fn credentials_are_not_needed_by_a_bookie_without_authentication() {
    let dir = tempfile::tempdir().unwrap();
    let (_storage, server) = test_bookie(dir.path());
    let addr = server.local_addr().to_string();
    for (entry, v2) in [(0, true), (1, false)] {
        let c = client(v2, Some(("bookkeeper-app", "s3cret")));
        assert_eq!(add(&c, &addr, entry), Ok(Reply::Added), "v2={v2}");
    }
}
