//! A growable byte buffer whose start is aligned for direct I/O (`O_DIRECT` reads and writes
//! need their memory, length and file offset aligned to the device's block). It owns only
//! memory; the files it is written to are the caller's.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

/// Alignment of the buffer's start, and the unit direct writes are made in: a page, which is a
/// multiple of every logical block size Linux supports.
pub const DIRECT_ALIGN: usize = 4096;

/// Bytes in a buffer whose first byte sits on a [`DIRECT_ALIGN`] boundary.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
}

// SAFETY: the buffer exclusively owns its allocation, like a `Vec<u8>`.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only read the bytes.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// An empty buffer holding at least `capacity` bytes before it grows.
    pub fn with_capacity(capacity: usize) -> Self {
        let mut buf = AlignedBuf {
            ptr: NonNull::dangling(),
            len: 0,
            cap: 0,
        };
        buf.grow_to(capacity.max(DIRECT_ALIGN));
        buf
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes it holds before it must grow.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `cap >= len` bytes, of which the first `len` are written.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// Makes room for `additional` more bytes (at least doubling, as a `Vec` does).
    pub fn reserve(&mut self, additional: usize) {
        let needed = self
            .len
            .checked_add(additional)
            .expect("buffer size overflow");
        if needed > self.cap {
            self.grow_to(needed.max(self.cap.saturating_mul(2)));
        }
    }

    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.reserve(bytes.len());
        // SAFETY: `reserve` made `cap - len >= bytes.len()`; the regions cannot overlap because
        // `bytes` is borrowed while `self` is borrowed mutably.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.ptr.as_ptr().add(self.len),
                bytes.len(),
            );
        }
        self.len += bytes.len();
    }

    /// Drops the first `n` bytes, moving the rest to the start (direct writes take whole blocks
    /// from the front and leave the partial last block for the next write).
    pub fn discard_front(&mut self, n: usize) {
        let n = n.min(self.len);
        let rest = self.len - n;
        // SAFETY: both ranges lie within the `len` written bytes; `copy` allows overlap.
        unsafe { std::ptr::copy(self.ptr.as_ptr().add(n), self.ptr.as_ptr(), rest) };
        self.len = rest;
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is valid for `cap >= len` bytes, of which the first `len` are written;
        // `&mut self` makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Keeps the first `len` bytes (no-op if there are fewer).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Makes the buffer `len` bytes long: cut, or extended with zeros.
    pub fn resize_zeroed(&mut self, len: usize) {
        if len <= self.len {
            self.len = len;
            return;
        }
        let extra = len - self.len;
        self.reserve(extra);
        // SAFETY: `reserve` made `cap - len >= extra`.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(self.len), 0, extra) };
        self.len = len;
    }

    /// Extends the buffer with zeros to the next multiple of `unit` bytes.
    pub fn pad_to(&mut self, unit: usize) {
        self.resize_zeroed(self.len.div_ceil(unit) * unit);
    }

    /// Appends up to `len` bytes read from `file` at `offset` with one `pread`, straight into
    /// the buffer's memory (no zeroing first); returns how many were read (0 at the end of the
    /// file). With a descriptor opened `O_DIRECT`, the caller keeps `offset`, `len` and the
    /// buffer's length multiples of [`DIRECT_ALIGN`].
    pub fn read_at(
        &mut self,
        file: &std::fs::File,
        offset: u64,
        len: usize,
    ) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        self.reserve(len);
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        loop {
            // SAFETY: `reserve(len)` left at least `len` writable bytes after the `self.len`
            // written ones; the kernel writes at most `len` bytes there, and `file` stays open.
            let n = unsafe {
                libc::pread(
                    file.as_raw_fd(),
                    self.ptr.as_ptr().add(self.len).cast(),
                    len,
                    offset,
                )
            };
            if n >= 0 {
                // `n <= len`: those bytes are now written.
                self.len += n as usize;
                return Ok(n as usize);
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }

    fn layout(cap: usize) -> Layout {
        Layout::from_size_align(cap, DIRECT_ALIGN).expect("buffer layout")
    }

    fn grow_to(&mut self, cap: usize) {
        let cap = cap.div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
        let layout = Self::layout(cap);
        // SAFETY: `cap` is non-zero (at least one block).
        let raw = unsafe { alloc::alloc(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        if self.cap > 0 {
            // SAFETY: the old allocation holds `len` written bytes and the new one `cap > len`
            // bytes; they are distinct allocations. The old one was made with `layout(self.cap)`.
            unsafe {
                std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), ptr.as_ptr(), self.len);
                alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.cap));
            }
        }
        self.ptr = ptr;
        self.cap = cap;
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.cap > 0 {
            // SAFETY: allocated by `grow_to` with exactly this layout.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.cap)) };
        }
    }
}

// `Bytes::from_owner` slices a buffer read from a log without copying it.
impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("cap", &self.cap)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_aligned_and_keeps_its_bytes_as_it_grows() {
        let mut buf = AlignedBuf::with_capacity(10);
        let mut model = Vec::new();
        for i in 0..5000u32 {
            let piece: Vec<u8> = (0..(i % 97) as u8).map(|b| b ^ i as u8).collect();
            buf.extend_from_slice(&piece);
            model.extend_from_slice(&piece);
            assert_eq!(buf.as_slice().as_ptr() as usize % DIRECT_ALIGN, 0);
        }
        assert_eq!(buf.as_slice(), &model[..]);
    }

    #[test]
    fn discarding_the_front_keeps_the_tail_at_the_start() {
        let mut buf = AlignedBuf::with_capacity(0);
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        buf.extend_from_slice(&data);
        buf.discard_front(8192);
        assert_eq!(buf.as_slice(), &data[8192..]);
        buf.discard_front(100_000);
        assert!(buf.is_empty());
        buf.extend_from_slice(b"again");
        assert_eq!(buf.as_slice(), b"again");
        buf.clear();
        assert_eq!(buf.len(), 0);
    }

    #[test]
    fn padding_and_resizing_fill_with_zeros() {
        let mut buf = AlignedBuf::with_capacity(0);
        buf.extend_from_slice(&[7u8; 10]);
        buf.pad_to(DIRECT_ALIGN);
        assert_eq!(buf.len(), DIRECT_ALIGN);
        assert_eq!(&buf.as_slice()[..10], &[7u8; 10]);
        assert!(buf.as_slice()[10..].iter().all(|b| *b == 0));
        buf.pad_to(DIRECT_ALIGN);
        assert_eq!(buf.len(), DIRECT_ALIGN);
        buf.truncate(10);
        buf.as_mut_slice()[9] = 1;
        buf.resize_zeroed(3 * DIRECT_ALIGN + 1);
        assert_eq!(buf.len(), 3 * DIRECT_ALIGN + 1);
        assert_eq!(buf.as_slice()[9], 1);
        assert!(buf.as_slice()[10..].iter().all(|b| *b == 0));
        buf.resize_zeroed(4);
        assert_eq!(buf.as_slice(), &[7u8; 4]);
    }
}
