//! Journal records: the mutations a journal carries and their byte encoding.
//! It never reads or writes files.
//!
//! Format 3 (written now) puts the record kind and then the file's tag last:
//! `[ledger][fields...][kind][tag]`, so that an entry record's body starts with exactly the body
//! of its entry-log record (`[ledger][entry][data]`) and the journal's checksum extends the
//! entry's own by five bytes: a large entry is checksummed once, not once per file. The tag is
//! made from the id of the file the record was written to ([`file_tag`]): a reused journal file
//! (`journalReuseFiles`) still holds the records of its previous life after the new ones, whole
//! and with valid checksums, and their tag is what tells them apart. Formats 2 (kind last, no
//! tag) and 1 (kind first) are still replayed.

use std::sync::Arc;

use bytes::Bytes;

use crate::record::{append_record, append_record_with_crc, be_u64, crc_of, RecordSink};

const KIND_KEY: u8 = 1;
const KIND_ENTRY: u8 = 2;
const KIND_FENCE: u8 = 3;
const KIND_LAC: u8 = 4;
const KIND_DELETE: u8 = 5;

/// One journal record.
#[derive(Debug, Clone)]
pub enum JournalOp {
    /// The ledger's master key; written before the first other record of a ledger in a process.
    Key {
        ledger: u64,
        key: Arc<[u8]>,
    },
    Entry {
        ledger: u64,
        entry: u64,
        data: Bytes,
        /// CRC32C of `[ledger][entry][data]` (big-endian ids): the body checksum of the
        /// entry's entry-log record, which the journal record's checksum extends. Made by
        /// [`JournalOp::entry`].
        crc: u32,
    },
    Fence {
        ledger: u64,
    },
    Lac {
        ledger: u64,
        lac: Bytes,
    },
    Delete {
        ledger: u64,
    },
}

impl JournalOp {
    /// An entry record, its checksum computed here (on the caller's thread, not the journal's).
    pub fn entry(ledger: u64, entry: u64, data: Bytes) -> JournalOp {
        let crc = entry_crc(ledger, entry, &data);
        JournalOp::Entry {
            ledger,
            entry,
            data,
            crc,
        }
    }

    pub fn ledger(&self) -> u64 {
        match self {
            JournalOp::Key { ledger, .. }
            | JournalOp::Entry { ledger, .. }
            | JournalOp::Fence { ledger }
            | JournalOp::Lac { ledger, .. }
            | JournalOp::Delete { ledger } => *ledger,
        }
    }

    /// Appends the record (format 3) for a file whose tag ([`file_tag`]) is `tag`.
    pub(super) fn encode(&self, out: &mut impl RecordSink, tag: u32) {
        let tag = tag.to_be_bytes();
        match self {
            JournalOp::Key { ledger, key } => {
                append_record(out, &[&ledger.to_be_bytes(), key, &[KIND_KEY], &tag])
            }
            JournalOp::Entry {
                ledger,
                entry,
                data,
                crc,
            } => append_record_with_crc(
                out,
                crc32c::crc32c_append(crc32c::crc32c_append(*crc, &[KIND_ENTRY]), &tag),
                &[
                    &ledger.to_be_bytes(),
                    &entry.to_be_bytes(),
                    data,
                    &[KIND_ENTRY],
                    &tag,
                ],
            ),
            JournalOp::Fence { ledger } => {
                append_record(out, &[&ledger.to_be_bytes(), &[KIND_FENCE], &tag])
            }
            JournalOp::Lac { ledger, lac } => {
                append_record(out, &[&ledger.to_be_bytes(), lac, &[KIND_LAC], &tag])
            }
            JournalOp::Delete { ledger } => {
                append_record(out, &[&ledger.to_be_bytes(), &[KIND_DELETE], &tag])
            }
        }
    }

    /// Decodes a record body of journal format `version` (1: kind first, 2: kind last, 3: kind
    /// and tag last; the tag is checked by [`record_tag`], not here).
    pub(super) fn decode(body: &[u8], version: u32) -> std::result::Result<JournalOp, String> {
        let body = if version >= 3 {
            &body[..body.len().saturating_sub(TAG_LEN)]
        } else {
            body
        };
        if body.len() < 9 {
            return Err(format!(
                "journal record of {} bytes is too short",
                body.len()
            ));
        }
        // `ids_and_rest`: the record without its kind byte, starting with the ledger id.
        let (kind, ids_and_rest) = if version >= 2 {
            (body[body.len() - 1], &body[..body.len() - 1])
        } else {
            (body[0], &body[1..])
        };
        let ledger = be_u64(&ids_and_rest[0..8]);
        let rest = &ids_and_rest[8..];
        Ok(match kind {
            KIND_KEY => JournalOp::Key {
                ledger,
                key: Arc::from(rest),
            },
            KIND_ENTRY if rest.len() >= 8 => JournalOp::Entry {
                ledger,
                entry: be_u64(&rest[0..8]),
                data: Bytes::copy_from_slice(&rest[8..]),
                // In both formats the ids and data lie together: `[ledger][entry][data]`.
                crc: crc32c::crc32c(ids_and_rest),
            },
            KIND_FENCE => JournalOp::Fence { ledger },
            KIND_LAC => JournalOp::Lac {
                ledger,
                lac: Bytes::copy_from_slice(rest),
            },
            KIND_DELETE => JournalOp::Delete { ledger },
            kind => return Err(format!("unknown journal record kind {kind}")),
        })
    }

    pub(super) fn kind_name(&self) -> &'static str {
        match self {
            JournalOp::Key { .. } => "key",
            JournalOp::Entry { .. } => "entry",
            JournalOp::Fence { .. } => "fence",
            JournalOp::Lac { .. } => "lac",
            JournalOp::Delete { .. } => "delete",
        }
    }
}

/// Bytes of a format-3 record's tag.
const TAG_LEN: usize = 4;

/// The tag a record is written with in file `file_id`: the id's low 32 bits, mixed by an odd
/// multiplier (a bijection, so files fewer than 2^32 ids apart never share a tag; ids grow by
/// one per file) so that tags do not look like record contents: a reused file of format 2 ends
/// its records with a kind byte after ids and data, which small ids would resemble.
pub(super) fn file_tag(file_id: u64) -> u32 {
    (file_id as u32).wrapping_mul(0x9E37_79B1) ^ 0x5042_4B58
}

/// The tag of a record body of format `version` (None before format 3, or if too short).
pub(super) fn record_tag(body: &[u8], version: u32) -> Option<u32> {
    if version < 3 || body.len() < TAG_LEN {
        return None;
    }
    let mut tag = [0u8; TAG_LEN];
    tag.copy_from_slice(&body[body.len() - TAG_LEN..]);
    Some(u32::from_be_bytes(tag))
}

/// CRC32C of an entry's `[ledger][entry][data]`: its entry-log record's body checksum.
pub fn entry_crc(ledger: u64, entry: u64, data: &[u8]) -> u32 {
    crc_of(&[&ledger.to_be_bytes(), &entry.to_be_bytes(), data])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RECORD_HEADER_LEN;
    use std::collections::HashSet;

    fn ops() -> Vec<JournalOp> {
        vec![
            JournalOp::Key {
                ledger: 7,
                key: Arc::from(&b"secret"[..]),
            },
            JournalOp::entry(7, 3, Bytes::from_static(b"payload")),
            JournalOp::entry(7, 4, Bytes::new()),
            JournalOp::Fence { ledger: 7 },
            JournalOp::Lac {
                ledger: 7,
                lac: Bytes::from_static(b"lac"),
            },
            JournalOp::Delete { ledger: 7 },
        ]
    }

    fn same(a: &JournalOp, b: &JournalOp) -> bool {
        format!("{a:?}") == format!("{b:?}")
    }

    #[test]
    fn format_3_round_trips_with_its_tag_and_entry_checksum_extends_the_entry_logs() {
        let tag = 0x5eed_0007;
        for op in ops() {
            let mut out = Vec::new();
            op.encode(&mut out, tag);
            let body = &out[RECORD_HEADER_LEN..];
            assert_eq!(crc32c::crc32c(body), be_u32_at(&out, 4), "{op:?}");
            assert_eq!(record_tag(body, 3), Some(tag));
            assert_eq!(record_tag(body, 2), None);
            let back = JournalOp::decode(body, 3).unwrap();
            assert!(same(&op, &back), "{op:?} -> {back:?}");
            if let JournalOp::Entry {
                ledger,
                entry,
                data,
                crc,
            } = &op
            {
                let mut log_record = Vec::new();
                append_record(
                    &mut log_record,
                    &[&ledger.to_be_bytes(), &entry.to_be_bytes(), data],
                );
                assert_eq!(be_u32_at(&log_record, 4), *crc);
                assert_eq!(
                    &body[..body.len() - 1 - TAG_LEN],
                    &log_record[RECORD_HEADER_LEN..]
                );
            }
        }
        assert_eq!(file_tag(0x1_0000_0002), file_tag(2));
        let tags: HashSet<u32> = (1..10_000u64).map(file_tag).collect();
        assert_eq!(tags.len(), 9_999);
    }

    #[test]
    fn format_2_records_still_decode() {
        let mut body = Vec::new();
        body.extend_from_slice(&9u64.to_be_bytes());
        body.extend_from_slice(&2u64.to_be_bytes());
        body.extend_from_slice(b"two");
        body.push(KIND_ENTRY);
        let op = JournalOp::decode(&body, 2).unwrap();
        assert!(same(
            &op,
            &JournalOp::entry(9, 2, Bytes::from_static(b"two"))
        ));
    }

    #[test]
    fn format_1_records_still_decode() {
        let mut body = vec![KIND_ENTRY];
        body.extend_from_slice(&9u64.to_be_bytes());
        body.extend_from_slice(&2u64.to_be_bytes());
        body.extend_from_slice(b"old");
        let op = JournalOp::decode(&body, 1).unwrap();
        assert!(same(
            &op,
            &JournalOp::entry(9, 2, Bytes::from_static(b"old"))
        ));
        let mut fence = vec![KIND_FENCE];
        fence.extend_from_slice(&9u64.to_be_bytes());
        assert!(matches!(
            JournalOp::decode(&fence, 1).unwrap(),
            JournalOp::Fence { ledger: 9 }
        ));
        assert!(JournalOp::decode(&[KIND_FENCE; 4], 2).is_err());
        assert!(JournalOp::decode(&[0u8; 9], 2).is_err());
    }

    fn be_u32_at(buf: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
    }
}
