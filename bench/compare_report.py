"""What a side-by-side run of ``bench.compare`` found, and how it is shown: the runs and the
run's results (their JSON under bench/results/), the figures over rounds (medians, paired
pybkx/Java ratios), the Markdown report and the PNG chart. It never starts a process or
measures anything, so ``--render`` can redo a report from a results file.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.compare_plan import (
    BATCH,
    DISK_CHUNKS,
    JAVA_BOOKIE_JVM,
    LABEL,
    LEDGER_COUNTS,
    LOW_LOAD_SIZES,
    READ_PAYLOAD,
    SIZES,
    SYNC_CHUNK,
    SYSTEMS,
)

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


@dataclass
class Run:
    """One load-generator run against one bookie."""

    round: int
    system: str
    kind: str  # add | low | paced | read | batch
    size: int
    ledgers: int
    in_flight: int
    requests: int
    entries: int
    bytes: int
    errors: int
    seconds: float
    p50_us: int
    p99_us: int
    p999_us: int
    cpu_s: float
    rate: float | None = None

    @property
    def entries_per_s(self) -> float:
        return self.entries / self.seconds if self.seconds else 0.0

    @property
    def cpu_s_per_m(self) -> float:
        return self.cpu_s / self.entries * 1e6 if self.entries else float("nan")


@dataclass
class Results:
    started: str
    quick: bool
    plan: dict[str, Any]
    machine: dict[str, str]
    settings: dict[str, str]
    runs: list[Run] = field(default_factory=list)
    disk: list[dict[str, float]] = field(default_factory=list)
    loopback_bytes_per_s: list[float] = field(default_factory=list)
    memory_kib: dict[str, dict[str, int]] = field(default_factory=dict)
    setup_s: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


def fmt_size(size: int) -> str:
    if size >= 1 << 20:
        return f"{size >> 20} MiB"
    return f"{size >> 10} KiB" if size >= 1024 else f"{size} B"


def fmt(x: float, digits: int = 0) -> str:
    if x != x:  # NaN
        return "-"
    return f"{x:,.{digits}f}"


def ms(us: float) -> str:
    return fmt(us / 1000, 2)


@dataclass
class Cell:
    """One system's figures for one workload, over all rounds."""

    runs: list[Run]

    def med(self, attr: str) -> float:
        values = [float(getattr(r, attr)) for r in self.runs]
        return statistics.median(values) if values else float("nan")

    @property
    def rate(self) -> float:
        return self.med("entries_per_s")

    @property
    def mb_per_s(self) -> float:
        values = [r.bytes / r.seconds / 1e6 for r in self.runs if r.seconds]
        return statistics.median(values) if values else float("nan")

    @property
    def cpu_per_m(self) -> float:
        entries = sum(r.entries for r in self.runs)
        return sum(r.cpu_s for r in self.runs) / entries * 1e6 if entries else float("nan")

    @property
    def errors(self) -> int:
        return sum(r.errors for r in self.runs)


def cells(results: Results, kind: str, size: int, ledgers: int) -> dict[str, Cell]:
    return {
        s: Cell(
            [
                r
                for r in results.runs
                if (r.kind, r.size, r.ledgers, r.system) == (kind, size, ledgers, s)
            ]
        )
        for s in SYSTEMS
    }


def paired_ratio(by: dict[str, Cell], attr: str = "entries_per_s") -> float:
    """Median over rounds of pybkx/Java for ``attr``."""
    java = {r.round: float(getattr(r, attr)) for r in by["java"].runs}
    ratios = [
        float(getattr(r, attr)) / java[r.round] for r in by["pybkx"].runs if java.get(r.round)
    ]
    return statistics.median(ratios) if ratios else float("nan")


def disk_share(results: Results, cell: Cell) -> float:
    """Median over rounds of a run's MB/s over the disk limit measured in the same round."""
    shares = [
        r.bytes / r.seconds / 1e6 / results.disk[r.round]["mb_per_s"]
        for r in cell.runs
        if r.seconds and r.round < len(results.disk) and results.disk[r.round]["mb_per_s"]
    ]
    return statistics.median(shares) if shares else float("nan")


def verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def render(results: Results) -> str:
    """The Markdown report of ``results``."""
    reads = {k: cells(results, k, READ_PAYLOAD, 1) for k in ("read", "batch")}
    batch_gain = {s: reads["batch"][s].rate / reads["read"][s].rate for s in SYSTEMS}
    out = [
        *_head(results),
        *_machine_limits(results),
        *_adds(results),
        *_low_load(results),
        *_paced(results),
        *_reads(results, reads, batch_gain),
        *_memory(results),
        *_targets(results, reads, batch_gain),
    ]
    return "\n".join(out) + "\n"


def _head(results: Results) -> list[str]:
    """The title, when and how it was measured, the machine and the settings."""
    out: list[str] = []
    w = out.append
    mode = "quick" if results.quick else "default"
    plan = results.plan
    w(f"# pybkx vs Apache BookKeeper 4.17: side by side ({mode} run)\n")
    w(
        f"Measured {results.started} in {results.seconds / 60:.1f} min by `python -m bench.compare"
        f"{' --quick' if results.quick else ''}`; {plan['rounds']} round(s), systems alternating "
        "which goes first. Figures are medians over rounds; ratios are medians of per-round "
        "pybkx/Java ratios.\n"
    )
    w("**Machine**: " + "; ".join(f"{k} {v}" for k, v in results.machine.items()) + "\n")
    w(
        "**Settings (both bookies)**: "
        + ", ".join(f"`{k}={v}`" for k, v in results.settings.items())
        + "; journal and ledger directories on the same disk. Java bookie: BookKeeper 4.17.3, "
        "default ledger storage (SortedLedgerStorage), `" + " ".join(JAVA_BOOKIE_JVM) + "`. "
        "pybkx bookie: `pybkx bookie --conf` (standalone). Load generator: pybkx's Rust V2 "
        f"client in the harness process, {plan['connections']} connection(s), adds with "
        f"{plan['in_flight']} in flight, reads with {plan['read_in_flight']} in flight; CRC32C "
        "digests.\n"
    )
    return out


def _machine_limits(results: Results) -> list[str]:
    """The disk's and the loopback's limits measured in the same run."""
    out: list[str] = []
    w = out.append
    disk = statistics.median(d["mb_per_s"] for d in results.disk)
    small = statistics.median(d["small_syncs_per_s"] for d in results.disk)
    net = statistics.median(results.loopback_bytes_per_s)
    w("## The machine's limits (same run)\n")
    w("| what | figure |")
    w("|---|---:|")
    for chunk in DISK_CHUNKS:
        mb = statistics.median(d[f"mb_per_s_{chunk >> 10}k"] for d in results.disk)
        w(f"| disk: sequential write + fdatasync, {fmt_size(chunk)} per sync | {fmt(mb, 1)} MB/s |")
    w(f"| disk limit (the better of the two, median over rounds) | {fmt(disk, 1)} MB/s |")
    w(
        f"| disk: write + fdatasync, {SYNC_CHUNK >> 10} KiB per sync | {fmt(small)} syncs/s "
        f"({fmt(1000 / small, 2) if small else '-'} ms each) |"
    )
    w(f"| loopback TCP, one connection | {fmt(net / 1e9, 2)} GB/s |\n")
    return out


def _adds(results: Results) -> list[str]:
    """Adds as fast as the window allows, per entry size and ledger count."""
    out: list[str] = []
    w = out.append
    plan = results.plan
    w("## Adds, as fast as the window allows\n")
    w(
        f"{plan['in_flight']} adds in flight; counts per run: "
        + ", ".join(f"{fmt_size(int(s))} {n:,}" for s, n in plan["add_counts"].items())
        + ".\n"
    )
    w(
        "| entry | ledgers | pybkx entries/s | MB/s | p50/p99/p99.9 ms | CPU s/M | "
        "Java entries/s | MB/s | p50/p99/p99.9 ms | CPU s/M | pybkx/Java entries/s |"
    )
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in SIZES:
        for ledgers in LEDGER_COUNTS:
            by = cells(results, "add", size, ledgers)
            row = [fmt_size(size), str(ledgers)]
            for s in SYSTEMS:
                c = by[s]
                row += [
                    fmt(c.rate) + (f" ({c.errors} errors)" if c.errors else ""),
                    fmt(c.mb_per_s, 1),
                    f"{ms(c.med('p50_us'))}/{ms(c.med('p99_us'))}/{ms(c.med('p999_us'))}",
                    fmt(c.cpu_per_m, 2),
                ]
            row.append(fmt(paired_ratio(by), 2))
            w("| " + " | ".join(row) + " |")
    w("")
    return out


def one_sync_ms(results: Results, rnd: int | None = None) -> float:
    """One small write + fdatasync of the disk, in ms: of round ``rnd``, or the median."""
    rates = [d["small_syncs_per_s"] for d in results.disk]
    if rnd is not None:
        rates = rates[rnd : rnd + 1]
    rate = statistics.median(rates) if rates else 0.0
    return 1000 / rate if rate else float("nan")


def low_load_over_sync(results: Results, size: int) -> float:
    """Median over rounds of pybkx's p50 add latency at one in flight over one fdatasync."""
    ratios = [
        r.p50_us / 1000 / one_sync_ms(results, r.round)
        for r in cells(results, "low", size, 1)["pybkx"].runs
        if r.round < len(results.disk)
    ]
    return statistics.median(ratios) if ratios else float("nan")


def _low_load(results: Results) -> list[str]:
    """Adds one at a time: the latency floor beside one fdatasync of the same disk."""
    out: list[str] = []
    w = out.append
    if not any(r.kind == "low" for r in results.runs):
        return out
    w("## Adds at low load (one in flight)\n")
    w(
        f"{results.plan.get('low_load_count', 0):,} adds per run, one at a time, one ledger: "
        "each waits for its own group commit. One fdatasync: the disk's small write + fdatasync "
        "measured in the same round.\n"
    )
    w(
        "| entry | pybkx p50/p99 ms | Java p50/p99 ms | one fdatasync ms | "
        "pybkx p50 / fdatasync | pybkx/Java entries/s |"
    )
    w("|---|---:|---:|---:|---:|---:|")
    for size in LOW_LOAD_SIZES:
        by = cells(results, "low", size, 1)
        p, j = by["pybkx"], by["java"]
        w(
            f"| {fmt_size(size)} | {ms(p.med('p50_us'))}/{ms(p.med('p99_us'))} "
            f"| {ms(j.med('p50_us'))}/{ms(j.med('p99_us'))} | {fmt(one_sync_ms(results), 2)} "
            f"| {fmt(low_load_over_sync(results, size), 2)} | {fmt(paired_ratio(by), 2)} |"
        )
    w("")
    return out


def _paced(results: Results) -> list[str]:
    """Add latency at equal load (paced adds)."""
    out: list[str] = []
    w = out.append
    w("## Add latency at equal load\n")
    w(
        "The same adds (1 ledger) sent open loop at one rate for both systems: half the slower "
        "one's closed-loop throughput. Latency counts from each request's due time.\n"
    )
    w(
        "| entry | rate entries/s | pybkx p50/p99/p99.9 ms | Java p50/p99/p99.9 ms | "
        "p99 pybkx/Java | pybkx CPU s/M | Java CPU s/M |"
    )
    w("|---|---:|---:|---:|---:|---:|---:|")
    for size in SIZES:
        by = cells(results, "paced", size, 1)
        p, j = by["pybkx"], by["java"]
        rate = p.runs[0].rate if p.runs and p.runs[0].rate else float("nan")
        w(
            f"| {fmt_size(size)} | {fmt(rate)} "
            f"| {ms(p.med('p50_us'))}/{ms(p.med('p99_us'))}/{ms(p.med('p999_us'))} "
            f"| {ms(j.med('p50_us'))}/{ms(j.med('p99_us'))}/{ms(j.med('p999_us'))} "
            f"| {fmt(paired_ratio(by, 'p99_us'), 2)} | {fmt(p.cpu_per_m, 2)} "
            f"| {fmt(j.cpu_per_m, 2)} |"
        )
    w("")
    return out


def _reads(
    results: Results, reads: dict[str, dict[str, Cell]], batch_gain: dict[str, float]
) -> list[str]:
    """Single and batch reads from cache, and the gain of batch over single reads."""
    out: list[str] = []
    w = out.append
    plan = results.plan
    w("## Reads from cache\n")
    w(
        f"{plan['read_entries']:,} entries of {READ_PAYLOAD} B, written and read once before "
        f"(so cached); {plan['read_in_flight']} requests in flight.\n"
    )
    w(
        "| read | pybkx entries/s | p50/p99 ms (per request) | CPU s/M | Java entries/s "
        "| p50/p99 ms | CPU s/M | pybkx/Java |"
    )
    w("|---|---:|---:|---:|---:|---:|---:|---:|")
    for kind, label in (("read", "single READ"), ("batch", f"BATCH_READ_ENTRY({BATCH})")):
        by = reads[kind]
        p, j = by["pybkx"], by["java"]
        w(
            f"| {label} | {fmt(p.rate)} | {ms(p.med('p50_us'))}/{ms(p.med('p99_us'))} "
            f"| {fmt(p.cpu_per_m, 2)} | {fmt(j.rate)} "
            f"| {ms(j.med('p50_us'))}/{ms(j.med('p99_us'))} "
            f"| {fmt(j.cpu_per_m, 2)} | {fmt(paired_ratio(by), 2)} |"
        )
    w("")
    w(
        f"Batch over single read: pybkx {fmt(batch_gain['pybkx'], 1)}x, Java "
        f"{fmt(batch_gain['java'], 1)}x (BP-62 reports 22x).\n"
    )
    return out


def _memory(results: Results) -> list[str]:
    """Peak and final RSS of both bookies."""
    out: list[str] = []
    w = out.append
    w("## Memory\n")
    w("| | pybkx | Java | pybkx/Java |")
    w("|---|---:|---:|---:|")
    for key, label in (("VmHWM", "peak RSS (VmHWM) MiB"), ("VmRSS", "RSS at the end MiB")):
        p = results.memory_kib.get("pybkx", {}).get(key, 0) / 1024
        j = results.memory_kib.get("java", {}).get(key, 0) / 1024
        w(f"| {label} | {fmt(p)} | {fmt(j)} | {fmt(p / j if j else float('nan'), 2)} |")
    w("")
    return out


def _targets(
    results: Results, reads: dict[str, dict[str, Cell]], batch_gain: dict[str, float]
) -> list[str]:
    """The figures against issue 6's targets, and how they were counted."""
    out: list[str] = []
    w = out.append
    w("## Against the targets (issue 6; issue 35's where marked)\n")
    w("| target | measured | |")
    w("|---|---|---|")
    for size in (100, 1024):
        for ledgers in LEDGER_COUNTS:
            r = paired_ratio(cells(results, "add", size, ledgers))
            w(
                f"| adds {fmt_size(size)} x{ledgers} ledger(s) ≥ 2x Java | {fmt(r, 2)}x "
                f"| {verdict(r >= 2)} |"
            )
    for ledgers in LEDGER_COUNTS:
        by = cells(results, "add", 16384, ledgers)
        share, java_share = (disk_share(results, by[s]) for s in SYSTEMS)
        w(
            f"| adds 16 KiB x{ledgers} ≥ 80% of the disk limit | {fmt(100 * share)}% "
            f"(Java {fmt(100 * java_share)}%) | {verdict(share >= 0.8)} |"
        )
    gain = batch_gain["pybkx"]
    w(f"| batch read ≥ 20x single read | {fmt(gain, 1)}x | {verdict(gain >= 20)} |")
    r = paired_ratio(reads["batch"])
    w(f"| batch read ≥ 2x Java's batch read | {fmt(r, 2)}x | {verdict(r >= 2)} |")
    for size in SIZES:
        r = paired_ratio(cells(results, "paced", size, 1), "p99_us")
        w(
            f"| p99 add latency ≤ Java's at equal load, {fmt_size(size)} | {fmt(r, 2)}x Java's "
            f"| {verdict(r <= 1)} |"
        )
    out += _floor_targets(results)
    errors = sum(r.errors for r in results.runs)
    w("")
    w(
        f"Failed requests over the whole run: {errors}. Bookie CPU counts utime + stime of the "
        "bookie process from the start of a run until it is idle again (its background flushes "
        "included); the load generator's own CPU is not counted. The disk limit is the better "
        "of sequential write + fdatasync with 512 KiB (journalBufferedWritesThreshold, the "
        "largest group a journal writes at once) and 4 MiB per sync (both journals may cover "
        "several groups with one sync); 16 KiB adds write each byte twice (journal and entry "
        "log), the limit counts it once. The 16 KiB share of the disk limit pairs each run with "
        "the disk baseline of its own round (the shared disk drifts between rounds)."
    )
    return out


def _floor_targets(results: Results) -> list[str]:
    """The figures against issue 35's targets (latency at the floor), as rows of the table."""
    out: list[str] = []
    w = out.append
    for size in (100, 1024):
        r = min(paired_ratio(cells(results, "add", size, n)) for n in LEDGER_COUNTS)
        w(
            f"| adds {fmt_size(size)} ≥ 3x Java (issue 35), worst ledger count | {fmt(r, 2)}x "
            f"| {verdict(r >= 3)} |"
        )
    if any(r.kind == "low" for r in results.runs):
        for size in LOW_LOAD_SIZES:
            r = low_load_over_sync(results, size)
            w(
                f"| p50 add at low load ≤ 1.3x one fdatasync, {fmt_size(size)} (issue 35) "
                f"| {fmt(r, 2)}x | {verdict(r <= 1.3)} |"
            )
    by = cells(results, "add", 16384, 16)
    java = {r.round: r.entries_per_s for r in by["java"].runs}
    per_round = [r.entries_per_s / java[r.round] for r in by["pybkx"].runs if java.get(r.round)]
    worst = min(per_round) if per_round else float("nan")
    w(
        f"| adds 16 KiB x16 ≥ 1.5x Java in every round (issue 35) | worst round {fmt(worst, 2)}x "
        f"| {verdict(worst >= 1.5)} |"
    )
    for size in SIZES:
        r = paired_ratio(cells(results, "paced", size, 1), "p99_us")
        w(
            f"| p99 add at equal load ≤ ½ Java's, {fmt_size(size)} (issue 35) | {fmt(r, 2)}x "
            f"| {verdict(r <= 0.5)} |"
        )
    return out


def chart(results: Results, path: Path) -> bool:
    """A PNG of the main figures; False if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    colors = {"pybkx": "#d9730d", "java": "#3a6ea5"}
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    width = 0.38

    def bars(ax: Any, labels: list[str], values: dict[str, list[float]], title: str) -> None:
        xs = range(len(labels))
        for i, s in enumerate(SYSTEMS):
            ax.bar(
                [x + (i - 0.5) * width for x in xs],
                values[s],
                width,
                label=LABEL[s],
                color=colors[s],
            )
        ax.set_xticks(list(xs), labels, fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)

    add_labels = [f"{fmt_size(s)}\nx{n}" for s in SIZES for n in LEDGER_COUNTS]
    adds = {
        s: [cells(results, "add", z, n)[s].rate for z in SIZES for n in LEDGER_COUNTS]
        for s in SYSTEMS
    }
    bars(axes[0][0], add_labels, adds, "adds/s (entry size x ledgers), higher is better")
    axes[0][0].set_yscale("log")
    paced = {
        s: [cells(results, "paced", z, 1)[s].med("p99_us") / 1000 for z in SIZES] for s in SYSTEMS
    }
    bars(
        axes[0][1],
        [fmt_size(z) for z in SIZES],
        paced,
        "p99 add latency at equal load (ms), lower is better",
    )
    reads = {
        s: [cells(results, k, READ_PAYLOAD, 1)[s].rate for k in ("read", "batch")] for s in SYSTEMS
    }
    bars(
        axes[1][0],
        ["single READ", f"BATCH_READ_ENTRY({BATCH})"],
        reads,
        "entries read/s from cache, higher is better",
    )
    axes[1][0].set_yscale("log")
    cpu_labels = [f"add {fmt_size(z)} x16" for z in SIZES] + ["read", "batch read"]
    cpu = {
        s: [cells(results, "add", z, 16)[s].cpu_per_m for z in SIZES]
        + [cells(results, k, READ_PAYLOAD, 1)[s].cpu_per_m for k in ("read", "batch")]
        for s in SYSTEMS
    }
    bars(axes[1][1], cpu_labels, cpu, "bookie CPU s per million entries, lower is better")
    axes[1][1].set_yscale("log")
    m = results.machine
    fig.suptitle(
        f"pybkx vs Apache BookKeeper 4.17 bookie ({'quick' if results.quick else 'default'} run, "
        f"{results.started})\n{m['cpu']}, {m['memory']}, {m['disk']}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_report(results: Results, out: Path) -> None:
    """``out``.md, .json and .png; the Markdown also goes to stdout."""
    report = render(results)
    png = out.with_suffix(".png")
    if chart(results, png):
        report += f"\n![pybkx vs Java]({png.name})\n"
    else:
        report += "\n(no chart: matplotlib is not installed; `make bench-compare` installs it)\n"
    out.with_suffix(".md").write_text(report)
    out.with_suffix(".json").write_text(json.dumps(asdict(results), indent=1) + "\n")
    print(report)
    written = [out.with_suffix(".md"), out.with_suffix(".json")] + ([png] if png.exists() else [])
    print("written: " + ", ".join(map(str, written)), file=sys.stderr)
