//! The fault seam of the storage's file calls: faults injected by path and operation (errors
//! or latency, for a number of calls or until removed), and the check each call makes first.
//! With no fault injected, a check is one relaxed atomic load. It never makes a file call.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::RwLock;

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

/// Whether any fault is injected: without one, a call's check is this one relaxed load.
pub(super) fn any_injected() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// Applies the injected faults matching (`op`, `path`): sleeps for delays, fails for errors.
pub(super) fn check(op: Op, path: &Path) -> io::Result<()> {
    if !any_injected() {
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

/// Makes the call `f` (of `op` on `path`) unless an injected fault fails it first.
pub(super) fn checked<T>(op: Op, path: &Path, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    check(op, path)?;
    f()
}
