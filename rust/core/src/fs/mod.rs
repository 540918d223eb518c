//! Every file-system call the storage engine makes: create, write, read, sync, preallocate,
//! rename, remove, directory sync and locks, each error carrying the operation and the path.
//! Each call passes the fault seam first ([`faults`]): tests (and `pybkx`'s fault suite) inject
//! errors or latency there by path and operation. It never decides file formats or what must be
//! durable.

mod faults;
#[cfg(test)]
mod tests;

pub use faults::{clear_faults, fault_hits, inject_fault, remove_fault, Fault, FaultAction, Op};

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;

use crate::aligned::{AlignedBuf, DIRECT_ALIGN};
use crate::error::{IoContext, Result, StorageError};
use faults::{check, checked};

/// Creates a new file for reading and writing; fails if it exists.
pub fn create_new(path: &Path) -> Result<File> {
    checked(Op::Create, path, || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
    })
    .ctx(|| format!("creating {}", path.display()))
}

/// Opens an existing file for reading.
pub fn open_read(path: &Path) -> Result<File> {
    checked(Op::Open, path, || File::open(path)).ctx(|| format!("opening {}", path.display()))
}

/// Opens an existing file for writing (not truncated).
pub fn open_write(path: &Path) -> Result<File> {
    checked(Op::Open, path, || OpenOptions::new().write(true).open(path))
        .ctx(|| format!("opening {} for writing", path.display()))
}

/// Opens an existing file for reading and writing (not truncated).
pub fn open_rw(path: &Path) -> Result<File> {
    checked(Op::Open, path, || {
        OpenOptions::new().read(true).write(true).open(path)
    })
    .ctx(|| format!("opening {}", path.display()))
}

/// Creates (or truncates) a file for writing.
pub fn create_truncate(path: &Path) -> Result<File> {
    checked(Op::Create, path, || {
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
    })
    .ctx(|| format!("creating {}", path.display()))
}

/// Appends `buf` at the file's position.
pub fn write_all(mut file: &File, path: &Path, buf: &[u8]) -> Result<()> {
    checked(Op::Write, path, || file.write_all(buf))
        .ctx(|| format!("writing {} bytes to {}", buf.len(), path.display()))
}

/// Writes `buf` at `offset`.
pub fn write_all_at(file: &File, path: &Path, buf: &[u8], offset: u64) -> Result<()> {
    checked(Op::Write, path, || file.write_all_at(buf, offset))
        .ctx(|| format!("writing {} bytes at {}:{offset}", buf.len(), path.display()))
}

/// Opens an existing file for direct writes (`O_DIRECT`: data goes from the caller's memory to
/// the device without a copy into the page cache). `Ok(None)` when the file system does not do
/// direct I/O (it refuses the flag with EINVAL): the caller writes through the page cache.
pub fn open_direct_write(path: &Path) -> Result<Option<File>> {
    open_direct(path, OpenOptions::new().write(true), "writes")
}

/// Opens `path` with `options` and `O_DIRECT`; `Ok(None)` when the file system refuses the flag.
fn open_direct(path: &Path, options: &mut OpenOptions, purpose: &str) -> Result<Option<File>> {
    use std::os::unix::fs::OpenOptionsExt;
    match checked(Op::Open, path, || {
        options.custom_flags(libc::O_DIRECT).open(path)
    }) {
        Ok(file) => Ok(Some(file)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(None),
        Err(e) => Err(e).ctx(|| format!("opening {} for direct {purpose}", path.display())),
    }
}

/// How a direct write ended.
#[derive(Debug)]
pub enum DirectWrite {
    Done,
    /// The file system refused this write's alignment (EINVAL): nothing is lost, the caller
    /// writes the same bytes through the page cache instead.
    Refused,
}

/// Writes `buf` at `offset` through a descriptor from [`open_direct_write`]. The memory, the
/// length and the offset must be multiples of the device's logical block size
/// ([`crate::aligned::DIRECT_ALIGN`] covers every size Linux supports).
pub fn write_direct_at(file: &File, path: &Path, buf: &[u8], offset: u64) -> Result<DirectWrite> {
    match checked(Op::Write, path, || file.write_all_at(buf, offset)) {
        Ok(()) => Ok(DirectWrite::Done),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(DirectWrite::Refused),
        Err(e) => Err(e).ctx(|| {
            format!(
                "writing {} bytes directly at {}:{offset}",
                buf.len(),
                path.display()
            )
        }),
    }
}

/// Opens an existing file for direct reads (`O_DIRECT`: data goes from the device to the
/// caller's memory, around the page cache). `Ok(None)` when the file system does not do direct
/// I/O (it refuses the flag with EINVAL): the caller reads through the page cache.
pub fn open_direct_read(path: &Path) -> Result<Option<File>> {
    open_direct(path, OpenOptions::new().read(true), "reads")
}

/// Reads the `len` bytes at `offset` through a descriptor from [`open_direct_read`]: the whole
/// blocks around them go into one aligned buffer and the bytes wanted are returned as a slice
/// of it, without a copy. `Ok(None)` when the file system refused the read's alignment (EINVAL):
/// nothing was read, the caller reads through the page cache instead. A file that ends before
/// `offset + len` is an error, as with [`read_exact_at`].
pub fn read_direct_at(file: &File, path: &Path, offset: u64, len: usize) -> Result<Option<Bytes>> {
    let align = DIRECT_ALIGN as u64;
    let start = offset / align * align;
    let wanted = (offset - start) as usize + len;
    let span = wanted.div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
    let mut buf = AlignedBuf::with_capacity(span);
    let read = checked(Op::Read, path, || {
        while buf.len() < wanted {
            let at = start + buf.len() as u64;
            if buf.read_at(file, at, span - buf.len())? == 0 {
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
            }
            // A short read ends at the file's end, which direct I/O may leave unaligned: the
            // next read would start mid-block, so the bytes must all be here by now.
            if buf.len() % DIRECT_ALIGN != 0 && buf.len() < wanted {
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
            }
        }
        Ok(())
    });
    match read {
        Ok(()) => {
            let from = (offset - start) as usize;
            Ok(Some(Bytes::from_owner(buf).slice(from..from + len)))
        }
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(None),
        Err(e) => Err(e).ctx(|| {
            format!(
                "reading {len} bytes directly at {}:{offset}",
                path.display()
            )
        }),
    }
}

/// Fills `buf` from `offset`.
pub fn read_exact_at(file: &File, path: &Path, buf: &mut [u8], offset: u64) -> Result<()> {
    checked(Op::Read, path, || file.read_exact_at(buf, offset))
        .ctx(|| format!("reading {} bytes at {}:{offset}", buf.len(), path.display()))
}

/// fdatasync: the file's data (and the metadata needed to read it) reach the disk.
pub fn fdatasync(file: &File, path: &Path) -> Result<()> {
    checked(Op::Sync, path, || file.sync_data()).ctx(|| format!("fdatasync {}", path.display()))
}

/// fsync: data and all metadata reach the disk.
pub fn fsync(file: &File, path: &Path) -> Result<()> {
    checked(Op::Sync, path, || file.sync_all()).ctx(|| format!("fsync {}", path.display()))
}

/// fsyncs a directory so that files created, renamed or removed in it stay so after a crash.
pub fn sync_dir(dir: &Path) -> Result<()> {
    checked(Op::Sync, dir, || File::open(dir).and_then(|d| d.sync_all()))
        .ctx(|| format!("syncing directory {}", dir.display()))
}

/// Reserves disk blocks so that appends need not allocate them. Best effort: a file system
/// without `posix_fallocate` (or an injected fault) only loses the speed-up.
pub fn preallocate(file: &File, path: &Path, offset: u64, len: u64) {
    if let Err(e) = check(Op::Allocate, path) {
        log::debug!("preallocating {}: {e}", path.display());
        return;
    }
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: plain syscall on an open descriptor owned by `file`.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), offset, len) };
    if rc != 0 {
        log::debug!(
            "posix_fallocate on {} failed with errno {rc}; continuing without preallocation",
            path.display()
        );
    }
}

/// Makes `file` hold `len` allocated bytes (a space reserve): `posix_fallocate`, or zeros
/// written where the file system cannot allocate without writing. Unlike [`preallocate`] a
/// failure is an error (ENOSPC when the disk has no room), since the caller relies on the space.
pub fn allocate(file: &File, path: &Path, len: u64) -> Result<()> {
    checked(Op::Allocate, path, || {
        let Ok(want) = i64::try_from(len) else {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        };
        if want == 0 {
            return Ok(());
        }
        // SAFETY: plain syscall on an open descriptor owned by `file`.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, want) };
        match rc {
            0 => Ok(()),
            libc::EOPNOTSUPP | libc::EINVAL => write_zeros(file, len),
            errno => Err(io::Error::from_raw_os_error(errno)),
        }
    })
    .ctx(|| format!("allocating {len} bytes for {}", path.display()))
}

/// Writes `len` zero bytes from offset 0, a MiB at a time.
fn write_zeros(file: &File, len: u64) -> io::Result<()> {
    let zeros = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < len {
        let n = (len - at).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// Whether `e` says the disk had no room (ENOSPC), also after the error was cloned.
pub fn is_no_space(e: &StorageError) -> bool {
    match e {
        StorageError::Io { source, .. } => {
            source.raw_os_error() == Some(libc::ENOSPC)
                || source.kind() == io::ErrorKind::StorageFull
        }
        _ => false,
    }
}

/// Hints that `len` bytes at `offset` will be read soon, so the kernel reads them ahead
/// asynchronously (a hint: errors are ignored, nothing is read here).
pub fn advise_will_need(file: &File, offset: u64, len: u64) {
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: plain syscall on an open descriptor owned by `file`; it reads no memory of ours.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_WILLNEED);
    }
}

/// Tells the kernel the file's pages in `offset..offset + len` will not be read again
/// (`posix_fadvise(DONTNEED)`): clean pages are dropped from the page cache at once. Advisory:
/// failures are ignored.
pub fn advise_dont_need(file: &File, offset: u64, len: u64) {
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: plain syscall on an open descriptor owned by `file`; it reads no memory of ours.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_DONTNEED);
    }
}

/// Starts writeback of the file's dirty pages in `offset..offset + len` without waiting for it
/// (Linux `sync_file_range(SYNC_FILE_RANGE_WRITE)`). Not a durability barrier: it keeps a large
/// writer's dirty data from piling up until a checkpoint's fsync has to write it all at once
/// (stalling every other sync of the disk meanwhile). Advisory: failures are ignored.
pub fn start_writeback(file: &File, offset: u64, len: u64) {
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: plain syscall on an open descriptor owned by `file`; it reads no memory of ours.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE);
    }
}

/// Cuts (or extends) the file to `len` bytes and syncs it.
pub fn truncate_and_sync(file: &File, path: &Path, len: u64) -> Result<()> {
    checked(Op::Truncate, path, || {
        file.set_len(len).and_then(|_| file.sync_all())
    })
    .ctx(|| format!("cutting {} to {len} bytes", path.display()))
}

pub fn remove_file(path: &Path) -> Result<()> {
    checked(Op::Remove, path, || fs::remove_file(path))
        .ctx(|| format!("removing {}", path.display()))
}

/// How much the storage frees at a time with [`cut_in_steps`], and the pause between cuts (how
/// long freeing a large file then takes: docs/performance.md, "Design figures behind the
/// code").
pub const FREE_STEP: u64 = 16 << 20;
pub const FREE_PAUSE: Duration = Duration::from_millis(2);

/// Removes a large file by cutting it down in steps ([`cut_in_steps`]) and unlinking what is
/// left. A `stop` seen between steps leaves the file shorter but in place (returns false). A
/// file already gone is not an error.
pub fn remove_file_in_steps(
    path: &Path,
    step: u64,
    pause: Duration,
    stop: Option<&AtomicBool>,
) -> Result<bool> {
    let file = match open_write(path) {
        Ok(f) => f,
        Err(StorageError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            return Ok(true)
        }
        Err(e) => return Err(e),
    };
    if !cut_in_steps(&file, path, step, pause, stop)? {
        return Ok(false);
    }
    drop(file);
    match checked(Op::Remove, path, || fs::remove_file(path)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(true),
        r => r
            .map(|_| true)
            .ctx(|| format!("removing {}", path.display())),
    }
}

/// Cuts `file` (open for writing; `path` names it in errors) down to at most `step` bytes,
/// `step` bytes at a time and `pause` apart, so that its blocks are freed gradually. ext4 frees
/// a file's blocks in one journal transaction, and every fsync on the file system waits for it:
/// unlinking a large file at once held concurrent `fdatasync`s far longer than cutting it in
/// steps (docs/performance.md, "Design figures behind the code"). Returns false if `stop` was
/// seen between steps.
pub fn cut_in_steps(
    file: &File,
    path: &Path,
    step: u64,
    pause: Duration,
    stop: Option<&AtomicBool>,
) -> Result<bool> {
    let mut len = file
        .metadata()
        .ctx(|| format!("reading the size of {}", path.display()))?
        .len();
    while len > step {
        if stop.is_some_and(|s| s.load(Ordering::Acquire)) {
            return Ok(false);
        }
        len -= step;
        checked(Op::Truncate, path, || file.set_len(len))
            .ctx(|| format!("cutting {} to {len} bytes", path.display()))?;
        std::thread::sleep(pause);
    }
    Ok(true)
}

pub fn rename(from: &Path, to: &Path) -> Result<()> {
    checked(Op::Rename, to, || fs::rename(from, to))
        .ctx(|| format!("renaming {} to {}", from.display(), to.display()))
}

pub fn create_dir_all(dir: &Path) -> Result<()> {
    checked(Op::Create, dir, || fs::create_dir_all(dir))
        .ctx(|| format!("creating {}", dir.display()))
}

/// `dir/current`, created if needed: where a bookie keeps its files, as BookKeeper does.
pub fn current_dir(dir: &Path) -> Result<PathBuf> {
    let cur = dir.join("current");
    create_dir_all(&cur)?;
    Ok(cur)
}

/// Takes an exclusive lock on a directory (its `LOCK` file) for the life of the returned file.
pub fn lock_dir(dir: &Path) -> Result<File> {
    let path = dir.join("LOCK");
    let f = checked(Op::Lock, &path, || {
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
    })
    .ctx(|| format!("opening {}", path.display()))?;
    // SAFETY: plain syscall on a descriptor owned by `f`.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(StorageError::Locked(dir.display().to_string()));
    }
    Ok(f)
}

/// Ids of the files `<hex id><suffix>` in `dir`, ascending.
pub fn list_hex_ids(dir: &Path, suffix: &str) -> Result<Vec<u64>> {
    let mut ids = Vec::new();
    for ent in fs::read_dir(dir).ctx(|| format!("listing {}", dir.display()))? {
        let ent = ent.ctx(|| format!("listing {}", dir.display()))?;
        let name = ent.file_name();
        if let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_suffix(suffix))
            .and_then(|s| u64::from_str_radix(s, 16).ok())
        {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// Size and free space of the file system holding `dir`, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskUsage {
    pub total_bytes: u64,
    /// Bytes an unprivileged writer may still use.
    pub free_bytes: u64,
}

/// The usage of the file system holding `dir` (statvfs).
pub fn disk_usage(dir: &Path) -> Result<DiskUsage> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|_| {
        StorageError::InvalidArgument(format!("path {} holds a NUL byte", dir.display()))
    })?;
    // SAFETY: statvfs fills the zeroed struct; `c` is a valid NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return Err(io::Error::last_os_error()).ctx(|| format!("statvfs {}", dir.display()));
    }
    let frsize = st.f_frsize as u64;
    Ok(DiskUsage {
        total_bytes: st.f_blocks as u64 * frsize,
        free_bytes: st.f_bavail as u64 * frsize,
    })
}
