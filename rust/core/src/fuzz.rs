//! Mutation fuzzing of every reader of bytes pybkx does not control: the V2 and V3 wire
//! decoders (any peer can send anything) and the readers of journal, entry log, index segment
//! and index log files (a disk can hand back anything). Each target starts from a corpus of
//! valid inputs kept in the repository (`rust/core/fuzz/corpus/<target>/`), mutates them (bit
//! flips, interesting integers, insertions, deletions, duplications, truncations, splices with
//! other inputs) and requires that the reader returns — an error is fine, a panic, a hang or an
//! unbounded allocation is not. A panicking input is saved under `rust/core/fuzz/crashes/` for
//! replay, then belongs in the corpus once fixed.
//!
//! The default `cargo test` runs a few thousand inputs per target; the long run is
//! `make fuzz` (5,000,000 inputs per wire decoder and 300,000 per file reader, 11.8 million in
//! all; `PYBKX_FUZZ_ITERATIONS` sets the count per target, `PYBKX_FUZZ_TARGETS` a subset).
//! `PYBKX_FUZZ_SEED` replays a run.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use crate::protocol::{self, v2, v3};
use crate::storage::entrylog;
use crate::storage::index::cache::BlockCache;
use crate::storage::index::segment::{segment_name, Segment};
use crate::storage::index::IndexLog;
use crate::storage::journal::{self, Mark};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus");
const CRASHES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/crashes");
/// Frames above this are refused by the decoders' callers, so the fuzzer's frames are too.
const MAX_FRAME: usize = 1 << 16;

/// What is fuzzed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    V2,
    V3,
    Journal,
    EntryLog,
    Segment,
    IndexLog,
}

impl Target {
    pub const ALL: [Target; 6] = [
        Target::V2,
        Target::V3,
        Target::Journal,
        Target::EntryLog,
        Target::Segment,
        Target::IndexLog,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Target::V2 => "v2",
            Target::V3 => "v3",
            Target::Journal => "journal",
            Target::EntryLog => "entrylog",
            Target::Segment => "segment",
            Target::IndexLog => "indexlog",
        }
    }

    /// Whether an input goes through files (slower: fewer inputs in the default run).
    fn uses_files(self) -> bool {
        !matches!(self, Target::V2 | Target::V3)
    }
}

/// A small deterministic generator (SplitMix64): runs replay from their seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Integers that break length and count fields.
const INTERESTING: [u32; 10] = [
    0,
    1,
    7,
    8,
    0x7f,
    0x80,
    0xffff,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
];

/// One to four random mutations of `input`; `other` may be spliced in.
pub fn mutate(input: &[u8], other: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..=rng.below(4) {
        let len = out.len();
        match rng.below(9) {
            0 if len > 0 => {
                let at = rng.below(len);
                out[at] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let at = rng.below(len);
                out[at] = rng.next() as u8;
            }
            2 if len >= 4 => {
                let at = rng.below(len - 3);
                let v = INTERESTING[rng.below(INTERESTING.len())];
                let bytes = if rng.below(2) == 0 {
                    v.to_be_bytes()
                } else {
                    v.to_le_bytes()
                };
                out[at..at + 4].copy_from_slice(&bytes);
            }
            3 => {
                let at = rng.below(len + 1);
                let n = 1 + rng.below(16);
                let fill: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                out.splice(at..at, fill);
            }
            4 if len > 0 => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(64));
                out.drain(at..at + n);
            }
            5 if len > 0 => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(64));
                let copy = out[at..at + n].to_vec();
                let to = rng.below(out.len() + 1);
                out.splice(to..to, copy);
            }
            6 if len > 0 => out.truncate(rng.below(len)),
            7 if !other.is_empty() => {
                let from = rng.below(other.len());
                let n = 1 + rng.below((other.len() - from).min(256));
                let at = rng.below(len + 1);
                out.splice(at..at, other[from..from + n].iter().copied());
            }
            _ => {
                let at = rng.below(len + 1);
                out.insert(at, INTERESTING[rng.below(INTERESTING.len())] as u8);
            }
        }
    }
    out
}

/// Feeds `input` to `target`'s readers. `scratch`: an empty directory the file targets may
/// fill (cleared by the caller between inputs).
pub fn run(target: Target, input: &[u8], scratch: &Path) {
    match target {
        Target::V2 => {
            for cut in [input.len(), input.len() / 2] {
                let mut buf = BytesMut::from(&input[..cut]);
                while let Ok(Some(body)) = protocol::take_frame(&mut buf, MAX_FRAME) {
                    let _ = v2::decode_request(body.clone());
                    let _ = v2::decode_response(body);
                }
            }
            let body = Bytes::copy_from_slice(input);
            let _ = v2::decode_request(body.clone());
            let _ = v2::decode_response(body);
        }
        Target::V3 => {
            let mut buf = BytesMut::from(input);
            while let Ok(Some(body)) = protocol::take_frame(&mut buf, MAX_FRAME) {
                let _ = v3::decode_request(body.clone());
                let _ = v3::decode_response(body);
            }
            let body = Bytes::copy_from_slice(input);
            let _ = v3::decode_request(body.clone());
            let _ = v3::decode_response(body);
            let _ = v3::availability_runs(input);
        }
        Target::Journal => {
            let path = journal::journal_path(scratch, 1);
            if std::fs::write(&path, input).is_err() {
                return;
            }
            let _ = journal::scan_file(&path);
            for skip_invalid in [false, true] {
                let _ = journal::replay(scratch, Mark::default(), skip_invalid, |ops, _| {
                    std::hint::black_box(ops.len());
                    Ok(())
                });
            }
        }
        Target::EntryLog => {
            let path = scratch.join(entrylog::log_name(1));
            if std::fs::write(&path, input).is_err() {
                return;
            }
            let _ = entrylog::scan_entries(&path, |l, e, o, d| {
                std::hint::black_box((l, e, o, d.len()));
            });
            let _ = entrylog::read_ledgers_map(&path);
        }
        Target::Segment => {
            if std::fs::write(scratch.join(segment_name(1)), input).is_err() {
                return;
            }
            let Ok(seg) = Segment::open(scratch, 1, 0) else {
                return;
            };
            let cache = BlockCache::new(1 << 20);
            let mut iter = seg.iter();
            let mut seen = 0;
            while let Ok(Some(e)) = iter.next_entry() {
                let _ = seg.get(e.ledger, e.entry, &cache);
                seen += 1;
                if seen > 10_000 {
                    break;
                }
            }
            for (l, e) in [(0, 0), (1, 0), (7, 3), (u64::MAX >> 1, 1)] {
                let _ = seg.get(l, e, &cache);
            }
        }
        Target::IndexLog => {
            if std::fs::write(scratch.join("index.log"), input).is_err() {
                return;
            }
            let _ = IndexLog::open(scratch);
        }
    }
}

/// The corpus of `target`, in file-name order.
pub fn corpus(target: Target) -> Vec<Vec<u8>> {
    let dir = Path::new(CORPUS).join(target.name());
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// What one fuzzing run of a target did.
#[derive(Debug)]
pub struct Outcome {
    pub inputs: u64,
    pub seconds: f64,
}

/// Runs `iterations` mutated inputs through `target`. Err: the saved path of an input that
/// panicked, and the panic.
pub fn fuzz(target: Target, iterations: u64, seed: u64) -> Result<Outcome, String> {
    let corpus = corpus(target);
    if corpus.is_empty() {
        return Err(format!("no corpus for {} under {CORPUS}", target.name()));
    }
    let scratch = tempfile::Builder::new()
        .prefix("pybkx-fuzz-")
        .tempdir_in(scratch_root())
        .map_err(|e| format!("scratch directory: {e}"))?;
    // An input that aborts the process (an allocation failure cannot be caught) stays here.
    eprintln!(
        "fuzz {}: seed {seed}, inputs written to {}",
        target.name(),
        scratch.path().display()
    );
    let mut rng = Rng::new(seed ^ (target as u64).wrapping_mul(0x9E37_79B9));
    let started = Instant::now();
    for i in 0..iterations {
        let base = &corpus[rng.below(corpus.len())];
        let other = &corpus[rng.below(corpus.len())];
        // Every corpus input as it is first, then mutations.
        let input = if (i as usize) < corpus.len() {
            corpus[i as usize].clone()
        } else {
            let mut input = mutate(base, other, &mut rng);
            // Half of a file target's inputs get valid checksums again, so that the mutation
            // reaches the decoders behind them instead of stopping at the first CRC check.
            if target.uses_files() && rng.below(2) == 0 {
                fix_checksums(&mut input);
            }
            input
        };
        if target.uses_files() {
            clear(scratch.path());
        }
        let result = catch_unwind(AssertUnwindSafe(|| run(target, &input, scratch.path())));
        if let Err(panic) = result {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let saved = save_crash(target, &input);
            return Err(format!(
                "{}: input {i} (seed {seed}) panicked: {why}; saved to {saved}",
                target.name()
            ));
        }
    }
    Ok(Outcome {
        inputs: iterations,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Recomputes the CRC32C of every record `[u32 len][u32 crc][body]` lying back to back after
/// the 32-byte file header, up to the first that does not fit.
pub fn fix_checksums(input: &mut [u8]) {
    let mut at = crate::record::FILE_HEADER_LEN;
    while at + crate::record::RECORD_HEADER_LEN <= input.len() {
        let len = crate::record::be_u32(&input[at..at + 4]) as usize;
        let body = at + crate::record::RECORD_HEADER_LEN;
        if len == 0 || body + len > input.len() {
            break;
        }
        let crc = crc32c::crc32c(&input[body..body + len]);
        input[at + 4..at + 8].copy_from_slice(&crc.to_be_bytes());
        at = body + len;
    }
}

/// A memory file system when there is one: file targets write an input per iteration.
fn scratch_root() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

fn clear(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

fn save_crash(target: Target, input: &[u8]) -> String {
    let dir = Path::new(CRASHES);
    let path = dir.join(format!(
        "{}-{:08x}.bin",
        target.name(),
        crc32c::crc32c(input)
    ));
    match std::fs::create_dir_all(dir).and_then(|_| std::fs::write(&path, input)) {
        Ok(()) => path.display().to_string(),
        Err(e) => format!("(not saved: {e})"),
    }
}

/// Writes the corpus: wire frames from the protocol modules' encoders, and the files of a real
/// storage after adds to several ledgers, a fence, an explicit LAC, a delete and a checkpoint.
pub fn write_corpus() -> std::io::Result<()> {
    use crate::storage::LedgerStorage;
    let root = Path::new(CORPUS);
    let put = |target: Target, name: &str, data: &[u8]| -> std::io::Result<()> {
        let dir = root.join(target.name());
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(name), data)
    };
    for (i, seed) in v2::tests::fuzz_seeds().iter().enumerate() {
        put(Target::V2, &format!("frame-{i:02}.bin"), seed)?;
    }
    for (i, seed) in v3::tests::fuzz_seeds().iter().enumerate() {
        put(Target::V3, &format!("frame-{i:02}.bin"), seed)?;
    }
    let dir = tempfile::tempdir()?;
    let storage = LedgerStorage::open(crate::testing::storage_config(dir.path()))
        .map_err(std::io::Error::other)?;
    let wait = |f: &dyn Fn(crate::storage::journal::Completion) -> crate::error::Result<()>| {
        let (tx, rx) = std::sync::mpsc::channel();
        f(Box::new(move |r| {
            let _ = tx.send(r);
        }))
        .map_err(std::io::Error::other)?;
        rx.recv()
            .map_err(std::io::Error::other)?
            .map_err(std::io::Error::other)
    };
    for ledger in [3u64, 7, 9] {
        for entry in 0..12u64 {
            let data = Bytes::from(format!("ledger {ledger} entry {entry} payload"));
            wait(&|d| storage.add_entry(ledger, entry, b"key", data.clone(), false, d))?;
        }
    }
    wait(&|d| storage.fence(7, b"key", d).map(|_| ()))?;
    storage.checkpoint().map_err(std::io::Error::other)?;
    wait(&|d| storage.add_entry(3, 12, b"key", Bytes::from_static(b"after"), false, d))?;
    wait(&|d| storage.delete_ledger(9, d))?;
    storage.close().map_err(std::io::Error::other)?;
    let mut found = 0;
    for entry in walk(dir.path()) {
        let name = entry
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let target = if name.ends_with(".txn") {
            Target::Journal
        } else if name.ends_with(".log") && name != "index.log" {
            Target::EntryLog
        } else if name.ends_with(".idx") {
            Target::Segment
        } else if name == "index.log" {
            Target::IndexLog
        } else {
            continue;
        };
        let mut data = std::fs::read(&entry)?;
        // Preallocated zeros past the written data add nothing but time.
        let end = data.iter().rposition(|b| *b != 0).map_or(0, |p| p + 1);
        data.truncate((end + 16).min(data.len()));
        put(target, &name, &data)?;
        found += 1;
    }
    if found < 4 {
        return Err(std::io::Error::other(format!(
            "expected journal, entry log, segment and index log files, found {found}"
        )));
    }
    Ok(())
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iterations(default: u64) -> u64 {
        std::env::var("PYBKX_FUZZ_ITERATIONS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    fn seed() -> u64 {
        std::env::var("PYBKX_FUZZ_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            })
    }

    #[test]
    fn every_target_has_a_corpus_that_reads_back_clean() {
        for target in Target::ALL {
            let corpus = corpus(target);
            assert!(!corpus.is_empty(), "no corpus for {}", target.name());
            let n = corpus.len() as u64;
            fuzz(target, n, 0).unwrap();
        }
    }

    #[test]
    fn mutations_are_reproducible_from_the_seed() {
        let (mut a, mut b) = (Rng::new(42), Rng::new(42));
        for _ in 0..100 {
            assert_eq!(
                mutate(b"some input", b"other", &mut a),
                mutate(b"some input", b"other", &mut b)
            );
        }
    }

    /// The short run of the default test suite.
    #[test]
    fn short_fuzz_run_of_every_target() {
        let seed = seed();
        for target in Target::ALL {
            let n = if target.uses_files() { 1_500 } else { 20_000 };
            if let Err(e) = fuzz(target, n, seed) {
                panic!("{e}");
            }
        }
    }

    /// `make fuzz`: the long run. `PYBKX_FUZZ_ITERATIONS` inputs per target (default 5,000,000
    /// per wire decoder and 300,000 per file reader: 11.8 million in all), `PYBKX_FUZZ_TARGETS`
    /// a comma-separated subset.
    #[test]
    #[ignore = "long run: make fuzz"]
    fn long_fuzz_run() {
        let seed = seed();
        let only = std::env::var("PYBKX_FUZZ_TARGETS").unwrap_or_default();
        let mut total = 0;
        for target in Target::ALL {
            if !only.is_empty() && !only.split(',').any(|t| t.trim() == target.name()) {
                continue;
            }
            let n = iterations(if target.uses_files() {
                300_000
            } else {
                5_000_000
            });
            match fuzz(target, n, seed) {
                Ok(o) => {
                    total += o.inputs;
                    println!(
                        "fuzz {}: {} inputs in {:.0} s ({:.0}/s), seed {seed}, no panic",
                        target.name(),
                        o.inputs,
                        o.seconds,
                        o.inputs as f64 / o.seconds.max(1e-9)
                    );
                }
                Err(e) => panic!("{e}"),
            }
        }
        println!("fuzz: {total} inputs in all, no panic");
    }

    /// Rewrites the committed corpus (`PYBKX_FUZZ_WRITE_CORPUS=1 cargo test ... write_corpus`).
    #[test]
    #[ignore = "rewrites rust/core/fuzz/corpus"]
    fn write_the_corpus() {
        write_corpus().unwrap();
    }
}
