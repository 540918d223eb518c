//! Entries laid out as columns, the way Arrow's `binary` arrays hold them: entry ids
//! (little-endian i64), payload offsets (little-endian i32, one more than entries) and every
//! payload back to back. One copy of the payloads, made off the interpreter's thread, so data
//! tools (Arrow, pandas, Spark) get a batch without a Python object per entry.

use bytes::Bytes;

use super::error::LedgerError;
use super::reader::ReadEntry;

/// The largest payload total one column batch may hold (32-bit offsets).
pub const MAX_COLUMN_BYTES: usize = i32::MAX as usize;

/// The columns of a run of entries.
#[derive(Debug, Clone)]
pub struct Columns {
    pub rows: usize,
    pub entry_ids: Bytes,
    pub offsets: Bytes,
    pub payloads: Bytes,
}

/// Packs `entries` into columns. Raises InvalidArgument when the payloads exceed
/// [`MAX_COLUMN_BYTES`] (the caller should read a shorter range).
pub fn pack(entries: &[ReadEntry]) -> Result<Columns, LedgerError> {
    let total: usize = entries.iter().map(|e| e.payload.len()).sum();
    if total > MAX_COLUMN_BYTES {
        return Err(LedgerError::InvalidArgument(format!(
            "{} entries hold {total} bytes, more than one column batch holds \
             ({MAX_COLUMN_BYTES}); read a shorter range",
            entries.len()
        )));
    }
    let mut ids = Vec::with_capacity(entries.len() * 8);
    let mut offsets = Vec::with_capacity((entries.len() + 1) * 4);
    let mut payloads = Vec::with_capacity(total);
    offsets.extend_from_slice(&0i32.to_le_bytes());
    for e in entries {
        ids.extend_from_slice(&e.entry_id.to_le_bytes());
        payloads.extend_from_slice(&e.payload);
        // Cannot overflow: the total was checked against i32::MAX above.
        offsets.extend_from_slice(&(payloads.len() as i32).to_le_bytes());
    }
    Ok(Columns {
        rows: entries.len(),
        entry_ids: Bytes::from(ids),
        offsets: Bytes::from(offsets),
        payloads: Bytes::from(payloads),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_hold_ids_offsets_and_payloads_in_order() {
        let c = pack(&[
            ReadEntry::test(7, b"ab"),
            ReadEntry::test(8, b""),
            ReadEntry::test(9, b"xyz"),
        ])
        .unwrap();
        assert_eq!(c.rows, 3);
        let ids: Vec<i64> = c
            .entry_ids
            .chunks(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(ids, [7, 8, 9]);
        let offsets: Vec<i32> = c
            .offsets
            .chunks(4)
            .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(offsets, [0, 2, 2, 5]);
        assert_eq!(&c.payloads[..], b"abxyz");
    }

    #[test]
    fn no_entries_make_one_offset() {
        let c = pack(&[]).unwrap();
        assert_eq!((c.rows, c.offsets.len(), c.payloads.len()), (0, 4, 0));
    }
}
