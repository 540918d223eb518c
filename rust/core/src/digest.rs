//! Entry digests as BookKeeper's DigestManager computes them, and the keys derived from a
//! ledger password. It packages and verifies entries; it never does I/O.
//!
//! Entry: `ledger i64, entry i64, lac i64, length i64, digest, payload`. The digest covers the
//! 32-byte header and the payload, never itself: CRC32 (stored as 8 bytes, zero-extended),
//! CRC32C (4 bytes), HMAC-SHA1 with key SHA-1("mac" + password) (20 bytes), DUMMY (none).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use hmac::{Hmac, Mac};
use sha1::{Digest, Sha1};

pub const ENTRY_HEADER_LEN: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestType {
    Crc32,
    Crc32c,
    Hmac,
    Dummy,
}

impl DigestType {
    /// BookKeeper's names (`MAC` is the API name of HMAC).
    pub fn from_name(name: &str) -> Option<DigestType> {
        match name.to_ascii_uppercase().as_str() {
            "CRC32" => Some(DigestType::Crc32),
            "CRC32C" => Some(DigestType::Crc32c),
            "HMAC" | "MAC" => Some(DigestType::Hmac),
            "DUMMY" => Some(DigestType::Dummy),
            _ => None,
        }
    }

    pub fn digest_len(self) -> usize {
        match self {
            DigestType::Crc32 => 8,
            DigestType::Crc32c => 4,
            DigestType::Hmac => 20,
            DigestType::Dummy => 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    #[error("entry of {0} bytes is shorter than its header and digest")]
    TooShort(usize),
    #[error("digest mismatch for entry {entry} of ledger {ledger}")]
    Mismatch { ledger: i64, entry: i64 },
    #[error("entry belongs to ledger {got}, expected {expected}")]
    WrongLedger { expected: i64, got: i64 },
    #[error("entry id is {got}, expected {expected}")]
    WrongEntry { expected: i64, got: i64 },
}

fn sha1_of(prefix: &[u8], password: &[u8]) -> [u8; 20] {
    let mut h = Sha1::new();
    h.update(prefix);
    h.update(password);
    h.finalize().into()
}

/// The ledger's master key, sent with every add and fencing read: SHA-1("ledger" + password).
pub fn master_key(password: &[u8]) -> [u8; 20] {
    sha1_of(b"ledger", password)
}

/// A verified entry's fields; `payload` shares the entry's buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedEntry {
    pub entry_id: i64,
    pub last_add_confirmed: i64,
    pub length: i64,
    pub payload: Bytes,
}

/// Packages and verifies the entries of one ledger.
#[derive(Clone)]
pub struct DigestManager {
    ledger: i64,
    kind: DigestType,
    mac_key: [u8; 20],
}

impl DigestManager {
    pub fn new(ledger: i64, password: &[u8], kind: DigestType) -> Self {
        DigestManager {
            ledger,
            kind,
            mac_key: sha1_of(b"mac", password),
        }
    }

    pub fn kind(&self) -> DigestType {
        self.kind
    }

    /// The ledger whose entries this manager packages and verifies.
    pub fn ledger_id(&self) -> i64 {
        self.ledger
    }

    fn digest(&self, header: &[u8], payload: &[u8], out: &mut [u8]) {
        match self.kind {
            DigestType::Crc32 => {
                let mut h = crc32fast::Hasher::new();
                h.update(header);
                h.update(payload);
                out.copy_from_slice(&(h.finalize() as u64).to_be_bytes());
            }
            DigestType::Crc32c => {
                let crc = crc32c::crc32c_append(crc32c::crc32c(header), payload);
                out.copy_from_slice(&crc.to_be_bytes());
            }
            DigestType::Hmac => {
                // A 20-byte key is always accepted by HMAC.
                let mut mac = match <Hmac<Sha1> as Mac>::new_from_slice(&self.mac_key) {
                    Ok(m) => m,
                    Err(_) => return,
                };
                mac.update(header);
                mac.update(payload);
                out.copy_from_slice(&mac.finalize().into_bytes());
            }
            DigestType::Dummy => {}
        }
    }

    /// The entry header: ledger id, entry id, LAC, length (big-endian).
    fn header(
        &self,
        entry_id: i64,
        last_add_confirmed: i64,
        length: i64,
    ) -> [u8; ENTRY_HEADER_LEN] {
        let mut header = [0u8; ENTRY_HEADER_LEN];
        header[0..8].copy_from_slice(&self.ledger.to_be_bytes());
        header[8..16].copy_from_slice(&entry_id.to_be_bytes());
        header[16..24].copy_from_slice(&last_add_confirmed.to_be_bytes());
        header[24..32].copy_from_slice(&length.to_be_bytes());
        header
    }

    /// Bytes of a packaged entry whose payload has `payload_len` bytes.
    pub fn packaged_len(&self, payload_len: usize) -> usize {
        ENTRY_HEADER_LEN + self.kind.digest_len() + payload_len
    }

    /// Appends the packaged entry to `out`.
    pub fn package_into(
        &self,
        entry_id: i64,
        last_add_confirmed: i64,
        length: i64,
        payload: &[u8],
        out: &mut BytesMut,
    ) {
        let header = self.header(entry_id, last_add_confirmed, length);
        let mut digest = [0u8; 20];
        let d = &mut digest[..self.kind.digest_len()];
        self.digest(&header, payload, d);
        out.reserve(self.packaged_len(payload.len()));
        out.put_slice(&header);
        out.put_slice(d);
        out.put_slice(payload);
    }

    /// Writes the packaged entry into `out`, which must be exactly
    /// [`packaged_len`](Self::packaged_len)`(payload.len())` bytes (a caller's own buffer, such
    /// as a Python `bytes` being made: no intermediate copy).
    pub fn package_to_slice(
        &self,
        entry_id: i64,
        last_add_confirmed: i64,
        length: i64,
        payload: &[u8],
        out: &mut [u8],
    ) {
        let (header, rest) = out.split_at_mut(ENTRY_HEADER_LEN);
        header.copy_from_slice(&self.header(entry_id, last_add_confirmed, length));
        let (digest, body) = rest.split_at_mut(self.kind.digest_len());
        self.digest(header, payload, digest);
        body.copy_from_slice(payload);
    }

    pub fn package(&self, entry_id: i64, lac: i64, length: i64, payload: &[u8]) -> Bytes {
        let mut out = BytesMut::new();
        self.package_into(entry_id, lac, length, payload, &mut out);
        out.freeze()
    }

    /// Checks digest and ledger id (and the entry id when one is expected).
    pub fn verify(
        &self,
        entry: &Bytes,
        expected_entry: Option<i64>,
    ) -> Result<VerifiedEntry, DigestError> {
        self.verify_owned(entry.clone(), expected_entry)
    }

    /// [`verify`](Self::verify) taking the entry: its payload is the same buffer advanced past
    /// the header, with no reference-count traffic (two atomic operations an entry on a batch
    /// read of thousands).
    pub fn verify_owned(
        &self,
        mut entry: Bytes,
        expected_entry: Option<i64>,
    ) -> Result<VerifiedEntry, DigestError> {
        let dlen = self.kind.digest_len();
        if entry.len() < ENTRY_HEADER_LEN + dlen {
            return Err(DigestError::TooShort(entry.len()));
        }
        let field = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&entry[i * 8..i * 8 + 8]);
            i64::from_be_bytes(a)
        };
        let (ledger, entry_id, lac, length) = (field(0), field(1), field(2), field(3));
        let header = &entry[..ENTRY_HEADER_LEN];
        let stored = &entry[ENTRY_HEADER_LEN..ENTRY_HEADER_LEN + dlen];
        let mut digest = [0u8; 20];
        self.digest(
            header,
            &entry[ENTRY_HEADER_LEN + dlen..],
            &mut digest[..dlen],
        );
        let matches = if dlen == 4 {
            // CRC32C, the common case: two words compared inline, not a memcmp call (a visible
            // share of a batch read of small entries: docs/performance.md, "Design figures
            // behind the code").
            let mut word = [0u8; 4];
            word.copy_from_slice(stored);
            u32::from_ne_bytes(word)
                == u32::from_ne_bytes([digest[0], digest[1], digest[2], digest[3]])
        } else {
            digest[..dlen] == *stored
        };
        if !matches {
            return Err(DigestError::Mismatch {
                ledger,
                entry: entry_id,
            });
        }
        if ledger != self.ledger {
            return Err(DigestError::WrongLedger {
                expected: self.ledger,
                got: ledger,
            });
        }
        if let Some(expected) = expected_entry {
            if entry_id != expected {
                return Err(DigestError::WrongEntry {
                    expected,
                    got: entry_id,
                });
            }
        }
        entry.advance(ENTRY_HEADER_LEN + dlen);
        Ok(VerifiedEntry {
            entry_id,
            last_add_confirmed: lac,
            length,
            payload: entry,
        })
    }

    /// A WRITE_LAC body, as BookKeeper's `computeDigestAndPackageForSendingLac`: ledger id and
    /// LAC (big-endian) followed by their digest.
    pub fn package_lac(&self, lac: i64) -> Bytes {
        let mut header = [0u8; LAC_HEADER_LEN];
        header[0..8].copy_from_slice(&self.ledger.to_be_bytes());
        header[8..16].copy_from_slice(&lac.to_be_bytes());
        let mut digest = [0u8; 20];
        let d = &mut digest[..self.kind.digest_len()];
        self.digest(&header, &[], d);
        let mut out = BytesMut::with_capacity(LAC_HEADER_LEN + d.len());
        out.put_slice(&header);
        out.put_slice(d);
        out.freeze()
    }

    /// The LAC of a READ_LAC answer's explicit-LAC body, once its digest and ledger id check
    /// (BookKeeper's `verifyDigestAndReturnLac`).
    pub fn verify_lac(&self, body: &[u8]) -> Result<i64, DigestError> {
        let dlen = self.kind.digest_len();
        if body.len() < LAC_HEADER_LEN + dlen {
            return Err(DigestError::TooShort(body.len()));
        }
        let field = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&body[i * 8..i * 8 + 8]);
            i64::from_be_bytes(a)
        };
        let (ledger, lac) = (field(0), field(1));
        let mut digest = [0u8; 20];
        self.digest(&body[..LAC_HEADER_LEN], &[], &mut digest[..dlen]);
        if digest[..dlen] != body[LAC_HEADER_LEN..LAC_HEADER_LEN + dlen] {
            return Err(DigestError::Mismatch { ledger, entry: -1 });
        }
        if ledger != self.ledger {
            return Err(DigestError::WrongLedger {
                expected: self.ledger,
                got: ledger,
            });
        }
        Ok(lac)
    }
}

/// Bytes of an explicit LAC's header (ledger id, LAC) before its digest.
pub const LAC_HEADER_LEN: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn reference_digests_and_keys() {
        assert_eq!(
            hex(&master_key(b"")),
            "850bf1071c5e3d8c24235676f8816ae0cbe2f14f"
        );
        assert_eq!(
            hex(&master_key(b"pw")),
            "2aa226ba095b6969a64871977693b14671710d76"
        );
        let header = "0000000000000001000000000000000000ffffffffffffffff0000000000000005";
        let _ = header;
        let crc32 = DigestManager::new(1, b"", DigestType::Crc32).package(0, -1, 5, b"hello");
        assert_eq!(crc32.len(), 45);
        assert_eq!(hex(&crc32[32..40]), "0000000030a56872");
        let crc32c = DigestManager::new(1, b"", DigestType::Crc32c).package(0, -1, 5, b"hello");
        assert_eq!(hex(&crc32c[32..36]), "e3a5f74d");
        let mac = DigestManager::new(1, b"pw", DigestType::Hmac).package(0, -1, 5, b"hello");
        assert_eq!(
            hex(&mac[32..52]),
            "b1f0ff29955d068a7855eecd5d4cb81fee2bf8df"
        );
        assert_eq!(
            DigestManager::new(1, b"", DigestType::Dummy)
                .package(0, -1, 5, b"hello")
                .len(),
            37
        );
    }

    #[test]
    fn explicit_lac_round_trips_and_catches_corruption() {
        for kind in [DigestType::Crc32, DigestType::Crc32c, DigestType::Hmac] {
            let dm = DigestManager::new(7, b"pw", kind);
            let body = dm.package_lac(41);
            assert_eq!(body.len(), LAC_HEADER_LEN + kind.digest_len());
            assert_eq!(dm.verify_lac(&body).ok(), Some(41));
            let mut bad = body.to_vec();
            bad[15] ^= 1;
            assert!(dm.verify_lac(&bad).is_err());
            assert!(DigestManager::new(8, b"pw", kind)
                .verify_lac(&body)
                .is_err());
        }
    }

    #[test]
    fn verification_catches_corruption_and_wrong_ids() {
        for kind in [DigestType::Crc32, DigestType::Crc32c, DigestType::Hmac] {
            let dm = DigestManager::new(9, b"secret", kind);
            let e = dm.package(4, 3, 100, b"payload");
            let v = dm.verify(&e, Some(4)).unwrap();
            assert_eq!((v.entry_id, v.last_add_confirmed, v.length), (4, 3, 100));
            assert_eq!(&v.payload[..], b"payload");
            let mut bad = e.to_vec();
            *bad.last_mut().unwrap() ^= 1;
            assert!(matches!(
                dm.verify(&Bytes::from(bad), None),
                Err(DigestError::Mismatch { .. })
            ));
            assert!(matches!(
                dm.verify(&e, Some(5)),
                Err(DigestError::WrongEntry { .. })
            ));
            assert!(DigestManager::new(8, b"secret", kind)
                .verify(&e, None)
                .is_err());
            assert!(dm.verify(&e.slice(..20), None).is_err());
        }
        let hm = DigestManager::new(9, b"secret", DigestType::Hmac).package(0, -1, 1, b"x");
        assert!(DigestManager::new(9, b"other", DigestType::Hmac)
            .verify(&hm, None)
            .is_err());
    }
}
