//! Socket helpers shared by the server and the client: vectored writes of frame chunks.
//! It never interprets bytes.

use std::io::IoSlice;

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Most slices handed to one `writev`.
const MAX_IOV: usize = 64;

/// Writes every chunk, in order, with as few vectored writes as the socket allows.
pub async fn write_all_chunks<W: AsyncWrite + Unpin>(
    writer: &mut W,
    chunks: &[Bytes],
) -> std::io::Result<()> {
    let mut idx = 0;
    let mut offset = 0;
    while idx < chunks.len() {
        let slices: Vec<IoSlice<'_>> = std::iter::once(&chunks[idx][offset..])
            .chain(chunks[idx + 1..].iter().map(|c| &c[..]))
            .take(MAX_IOV)
            .map(IoSlice::new)
            .collect();
        let mut n = writer.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 && idx < chunks.len() {
            let left = chunks[idx].len() - offset;
            if n >= left {
                n -= left;
                idx += 1;
                offset = 0;
            } else {
                offset += n;
                n = 0;
            }
        }
    }
    Ok(())
}
