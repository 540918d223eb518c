//! Every file-system call the storage engine makes: create, write, read, sync, preallocate,
//! rename, remove, directory sync and locks, each error carrying the operation and the path.
//! It owns the fault seam: tests (and `pybkx`'s fault suite) inject errors or latency here by
//! path and operation. It never decides file formats or what must be durable.
//!
//! With no fault injected, a call costs one relaxed atomic load on top of the syscall.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::RwLock;

use crate::aligned::{AlignedBuf, DIRECT_ALIGN};
use crate::error::{IoContext, Result, StorageError};

/// The operations a fault can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Create,
    Open,
    Write,
    Read,
    Sync,
    Allocate,
    Truncate,
    Remove,
    Rename,
    Lock,
}

impl Op {
    /// Parses an operation name as the Python API spells it (`"write"`, `"sync"`, ...).
    pub fn from_name(name: &str) -> Option<Op> {
        Some(match name {
            "create" => Op::Create,
            "open" => Op::Open,
            "write" => Op::Write,
            "read" => Op::Read,
            "sync" => Op::Sync,
            "allocate" => Op::Allocate,
            "truncate" => Op::Truncate,
            "remove" => Op::Remove,
            "rename" => Op::Rename,
            "lock" => Op::Lock,
            _ => return None,
        })
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// What an injected fault does to a matching call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultAction {
    /// The call fails with this errno (e.g. `libc::ENOSPC`, `libc::EIO`) without being made.
    Fail(i32),
    /// The call is made after this delay (a slow disk).
    Delay(Duration),
}

/// One injected fault: calls of `ops` on paths under `path_prefix`.
#[derive(Debug, Clone)]
pub struct Fault {
    pub path_prefix: PathBuf,
    pub ops: Vec<Op>,
    pub action: FaultAction,
    /// How many matching calls it affects; None: until removed.
    pub times: Option<u64>,
}

struct Rule {
    id: u64,
    prefix: PathBuf,
    ops: u32,
    action: FaultAction,
    left: Option<u64>,
    /// Calls it applied to.
    hits: u64,
}

static ACTIVE: AtomicBool = AtomicBool::new(false);
static RULES: RwLock<Vec<Rule>> = RwLock::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Injects a fault into this process's storage I/O; returns its id for [`remove_fault`].
pub fn inject_fault(fault: Fault) -> u64 {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut rules = RULES.write();
    rules.push(Rule {
        id,
        prefix: fault.path_prefix,
        ops: fault.ops.iter().fold(0, |m, op| m | op.bit()),
        action: fault.action,
        left: fault.times,
        hits: 0,
    });
    ACTIVE.store(true, Ordering::Release);
    id
}

/// Removes one injected fault (no-op if it is gone).
pub fn remove_fault(id: u64) {
    let mut rules = RULES.write();
    rules.retain(|r| r.id != id);
    ACTIVE.store(!rules.is_empty(), Ordering::Release);
}

/// How many calls the injected fault `id` has applied to so far (0 once it is gone): with
/// `FaultAction::Delay(Duration::ZERO)`, a count of the calls a test causes.
pub fn fault_hits(id: u64) -> u64 {
    RULES
        .read()
        .iter()
        .find(|r| r.id == id)
        .map_or(0, |r| r.hits)
}

/// Removes every injected fault.
pub fn clear_faults() {
    RULES.write().clear();
    ACTIVE.store(false, Ordering::Release);
}

/// Applies the injected faults matching (`op`, `path`): sleeps for delays, fails for errors.
fn check(op: Op, path: &Path) -> io::Result<()> {
    if !ACTIVE.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut delay = Duration::ZERO;
    let mut fail = None;
    {
        let mut rules = RULES.write();
        for rule in rules.iter_mut() {
            if rule.ops & op.bit() == 0 || !path.starts_with(&rule.prefix) {
                continue;
            }
            if let Some(left) = rule.left.as_mut() {
                if *left == 0 {
                    continue;
                }
                *left -= 1;
            }
            rule.hits += 1;
            match rule.action {
                FaultAction::Delay(d) => delay += d,
                FaultAction::Fail(errno) => fail = fail.or(Some(errno)),
            }
        }
        rules.retain(|r| r.left != Some(0));
        ACTIVE.store(!rules.is_empty(), Ordering::Release);
    }
    if !delay.is_zero() {
        std::thread::sleep(delay);
    }
    match fail {
        Some(errno) => Err(io::Error::from_raw_os_error(errno)),
        None => Ok(()),
    }
}

fn checked<T>(op: Op, path: &Path, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    check(op, path)?;
    f()
}

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

/// How much the storage frees at a time with [`cut_in_steps`], and the pause between cuts:
/// 2 GiB take about 0.7 s.
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
/// unlinking 2 GiB at once took 0.45–0.56 s here and held concurrent `fdatasync`s up to 106 ms
/// (with the `discard` mount option; 63 ms and 14 ms without); cut 16 MiB at a time they waited
/// at most 7 ms. Returns false if `stop` was seen between steps.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_removed_in_steps_are_gone_or_left_shorter_when_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        std::fs::write(&path, vec![1u8; 5 << 20]).unwrap();
        let stop = AtomicBool::new(true);
        // Stopped before its first cut: the file stays whole.
        assert!(!remove_file_in_steps(&path, 1 << 20, Duration::ZERO, Some(&stop)).unwrap());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 5 << 20);
        stop.store(false, Ordering::Release);
        assert!(remove_file_in_steps(&path, 1 << 20, Duration::ZERO, Some(&stop)).unwrap());
        assert!(!path.exists());
        // Gone already (a removal stopped by a crash after the unlink): not an error.
        assert!(remove_file_in_steps(&path, 1 << 20, Duration::ZERO, None).unwrap());
        // Smaller than a step: unlinked at once.
        std::fs::write(&path, b"small").unwrap();
        assert!(remove_file_in_steps(&path, 1 << 20, Duration::ZERO, None).unwrap());
        assert!(!path.exists());
    }

    // Faults are process-wide: one test owns the injection API so tests never race on it.
    #[test]
    fn injected_faults_fail_or_delay_matching_calls_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = create_new(&path).unwrap();
        let id = inject_fault(Fault {
            path_prefix: dir.path().to_path_buf(),
            ops: vec![Op::Sync],
            action: FaultAction::Fail(libc::ENOSPC),
            times: Some(2),
        });
        write_all(&file, &path, b"data").unwrap();
        for _ in 0..2 {
            let err = fdatasync(&file, &path).unwrap_err();
            assert!(err.to_string().contains("fdatasync"), "{err}");
            let StorageError::Io { source, .. } = err else {
                panic!("not an I/O error");
            };
            assert_eq!(source.raw_os_error(), Some(libc::ENOSPC));
        }
        fdatasync(&file, &path).unwrap(); // the fault was good for two calls
        remove_fault(id);

        let other = tempfile::tempdir().unwrap();
        let slow = inject_fault(Fault {
            path_prefix: other.path().to_path_buf(),
            ops: vec![Op::Write],
            action: FaultAction::Delay(Duration::from_millis(50)),
            times: None,
        });
        let started = std::time::Instant::now();
        write_all(&file, &path, b"x").unwrap(); // another directory: not delayed
        let p2 = other.path().join("g");
        let g = create_new(&p2).unwrap();
        write_all(&g, &p2, b"y").unwrap();
        assert!(started.elapsed() >= Duration::from_millis(50));
        clear_faults();
        assert!(!ACTIVE.load(Ordering::Relaxed));
        let _ = slow;
    }

    #[test]
    fn disk_usage_reports_a_plausible_file_system() {
        let dir = tempfile::tempdir().unwrap();
        let u = disk_usage(dir.path()).unwrap();
        assert!(u.total_bytes > 0 && u.free_bytes <= u.total_bytes);
    }
}
