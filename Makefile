# pybkx developer commands. `make demo` and `make test` work from a fresh clone: they create
# .venv/, install the Python tools and build the Rust extension themselves.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
VENV_ABS := $(CURDIR)/$(VENV)
VPY := $(VENV)/bin/python
DEPS_STAMP := $(VENV)/.deps-stamp
BENCH_STAMP := $(VENV)/.bench-deps-stamp
PY_SOURCES := python tests bench
MATURIN_TARGET_DIR := $(CURDIR)/target/maturin

# Debian packages the build or the tests need; `make deps` installs the missing ones (as root).
# nftables and iproute2: the fault suite's network partitions (tests/faults/netns.py).
APT_PACKAGES ?= zookeeper tmux iproute2 nftables

# Every cargo command (and maturin) sees the same interpreter, so pyo3's build script is not
# re-run when switching between `maturin develop` and `cargo test`.
export PYO3_PYTHON := $(VENV_ABS)/bin/python
# Test binaries link libpython; find the interpreter's own copy at run time.
PY_LIBDIR := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')
CARGO_TEST_ENV := LD_LIBRARY_PATH="$(PY_LIBDIR)$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH}"

.PHONY: help venv deps build lint test demo bench bench-client bench-suite bench-compare bench-builds \
	bench-metrics bench-striped bench-speculative bench-recovery bench-v3 bench-tls bench-spark bench-storage-scale \
	bench-cold-read bench-cold-read-java bench-java-client bench-group-commit bench-gc bench-tiers bench-large-adds bench-sustained-adds bench-journal-reuse bench-noisy bench-scrub bench-replica-digest bench-offload s3-server faults faults-deps fuzz clean distclean

help:
	@echo "make demo   build everything, then run the cluster demo (pybkx demo)"
	@echo "make test   build everything, lint, run Rust and Python tests"
	@echo "make bench  storage throughput, restart time, bookie reads/adds vs Apache BookKeeper"
	@echo "make bench-client   the Python client's appends and reads against the load generator"
	@echo "make bench-suite    pytest-benchmark suite: micro (codec, CRC32C, journal, index), system"
	@echo "make bench-compare  pybkx vs the Java bookie side by side -> bench/results/"
	@echo "                    (BENCH_ARGS=--quick for a short run; see python -m bench.compare -h)"
	@echo "make bench-builds OTHER=DIR   this tree beside another built tree and the Java bookie"
	@echo "make bench-java-client  adds through the Java ledger client: pybkx vs the Java bookie"
	@echo "make bench-group-commit adaptive group commit beside the fixed group wait, same run"
	@echo "make bench-metrics  adds/s and CPU per add with metrics on vs off, same run"
	@echo "make bench-striped  reads of a striped ledger (E=3 Qw=2) vs a whole one (E=3 Qw=3)"
	@echo "make bench-speculative  read p50/p99 with a replica paused 5 s in 20: speculative reads on/off"
	@echo "make bench-recovery a bookie killed for good, its ledgers healed: MB/s vs the disk"
	@echo "make bench-v3       adds and reads over V3 beside V2, pybkx and Java bookies, one run"
	@echo "make bench-tls      adds and batch reads over TLS beside plaintext, pybkx and Java bookies"
	@echo "make bench-noisy    one client's add p50/p99 alone and beside another's batch-read flood"
	@echo "make bench-storage-scale ENTRIES=N  N entries indexed: memory, restart, lookups/s"
	@echo "make bench-cold-read      an interleaved ledger read back cold vs the disk's speed"
	@echo "make bench-cold-read-java the same over the wire beside the Java DbLedgerStorage"
	@echo "make bench-gc       entry-log GC of 10,000 deleted ledgers; compaction vs disk speed"
	@echo "make bench-tiers    adds with entry logs moving between tiers vs without, same run"
	@echo "make bench-large-adds   16 KiB adds over 16 ledgers beside the Java bookie and the disk"
	@echo "make bench-sustained-adds  many runs of adds back to back on one bookie, each reported"
	@echo "make bench-journal-reuse  sync adds on a cycled journal, files reused vs created"
	@echo "make bench-spark    Spark reading ledgers vs the same rows in Parquet, one run"
	@echo "make bench-offload  ledgers offloaded to S3 (S3Proxy) vs its PUT rate; scans vs GET"
	@echo "make faults [LONG=1 DURATION=s]  the fault suite; LONG=1: an hour of nemesis schedules"
	@echo "make fuzz   the long fuzzing run of the wire decoders and file readers (rust/core/src/fuzz.rs)"
	@echo "make s3-server  install S3Proxy (the object-storage tests' S3 server) from Maven Central"
	@echo "make venv | deps | build | lint | clean | distclean"

venv: $(DEPS_STAMP)

$(VPY):
	$(PYTHON) -m venv $(VENV)

# Tools come from pyproject.toml: build-system requires, dependencies and the dev extra.
$(DEPS_STAMP): pyproject.toml | $(VPY)
	$(VPY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(VPY) -c 'import tomllib; d = tomllib.load(open("pyproject.toml", "rb")); \
	    print("\n".join(d["build-system"]["requires"] + d["project"]["dependencies"] \
	    + d["project"]["optional-dependencies"]["dev"]))' > $(VENV)/requirements-dev.txt
	$(VPY) -m pip install --quiet --disable-pip-version-check -r $(VENV)/requirements-dev.txt
	touch $@

# Bench-only tools (the `bench` extra: matplotlib, py-spy); `make test` never installs them.
$(BENCH_STAMP): pyproject.toml | $(DEPS_STAMP)
	$(VPY) -c 'import tomllib; d = tomllib.load(open("pyproject.toml", "rb")); \
	    print("\n".join(d["project"]["optional-dependencies"]["bench"]))' \
	    > $(VENV)/requirements-bench.txt
	$(VPY) -m pip install --quiet --disable-pip-version-check -r $(VENV)/requirements-bench.txt
	touch $@

deps:
	@missing=""; \
	for pkg in $(APT_PACKAGES); do \
	    dpkg-query -W -f='$${Status}' "$$pkg" 2>/dev/null | grep -q "install ok installed" \
	        || missing="$$missing $$pkg"; \
	done; \
	if [ -z "$$missing" ]; then \
	    echo "deps: all Debian packages present ($(or $(strip $(APT_PACKAGES)),none needed))"; \
	elif [ "$$(id -u)" -ne 0 ]; then \
	    echo "deps: WARNING: missing Debian packages:$$missing; not root, so not installing." \
	         "Run 'sudo make deps'. Skipping."; \
	else \
	    echo "deps: installing$$missing"; \
	    apt-get update -q; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	fi

# Editable install into .venv: the extension lands in python/pybkx/, the package on sys.path.
# The development build has the `bench` feature (load generator, micro kernels) that the
# benchmarks and some tests use; a plain `pip install .` leaves it out.
# maturin sets PYO3_BUILD_EXTENSION_MODULE (and more) for its build; in a target dir of its own
# that does not invalidate the artifacts of `cargo test`/`cargo clippy`, so neither rebuilds pyo3.
build: venv
	VIRTUAL_ENV=$(VENV_ABS) PATH="$(VENV_ABS)/bin:$$PATH" \
	    CARGO_TARGET_DIR=$(MATURIN_TARGET_DIR) $(VENV)/bin/maturin develop --release --features bench

# S3Proxy, the S3-compatible server the object-storage tests start (tests/support/s3server.py):
# its jars come from Maven Central into the Maven cache, its classpath is kept in target/s3proxy/
# (resolved again only when tests/support/s3proxy/pom.xml changes).
s3-server: venv
	cd tests && ../$(VPY) -m support.s3server install

lint: venv
	cargo fmt --all --check
	cargo clippy --workspace --all-targets --all-features -- -D warnings
	$(VENV)/bin/ruff check $(PY_SOURCES)
	$(VENV)/bin/ruff format --check $(PY_SOURCES)
	$(VENV)/bin/mypy python/pybkx

test: venv deps build lint s3-server
	$(CARGO_TEST_ENV) cargo test --release --workspace --all-features
	@rc=0; $(VENV)/bin/pytest || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest: no Python tests collected (exit 5), treated as success"; \
	elif [ $$rc -ne 0 ]; then exit $$rc; fi

# The fault suite's Debian packages (nftables, iproute2) are part of APT_PACKAGES, so `make deps`
# (and so `make test`) installs them; this alias names them for the fault suite.
faults-deps: deps

# The nemesis (tests/faults/nemesis.py): a short run of tests/faults/test_nemesis.py, or with
# LONG=1 one randomized schedule of DURATION seconds (default 3600), network faults and disk_full
# (every bookie's own 256 MiB tmpfs filled to 100% once a minute: what an hour's workload keeps
# fits) included when run as root; prints faults by kind, entries acknowledged, violations.
DURATION ?= 3600
faults: venv deps build
ifeq ($(LONG),1)
	$(VPY) tests/faults/nemesis.py --duration $(DURATION) $$( [ "$$(id -u)" -eq 0 ] && echo --net --disk-full --disk-mib 256 --disk-full-every 60 )
else
	$(VENV)/bin/pytest -q -s tests/faults/test_nemesis.py
endif

demo: venv deps build
	$(VENV)/bin/pybkx demo

bench: venv deps build
	$(VPY) bench/storage_throughput.py
	$(VPY) bench/restart_time.py
	$(VPY) bench/bookie_reads.py
	$(VPY) bench/placement_bench.py

bench-client: venv deps build
	$(VPY) -m bench.client_targets $(BENCH_ARGS)

bench-suite: venv build
	$(VENV)/bin/pytest bench --benchmark-only

BENCH_ARGS ?=
bench-compare: venv deps build $(BENCH_STAMP)
	$(VPY) -m bench.compare $(BENCH_ARGS)

# Adds through Apache BookKeeper's own Java ledger client (V2), pybkx bookie vs Java bookie.
bench-java-client: venv deps build $(BENCH_STAMP)
	$(VPY) -m bench.java_client_adds $(BENCH_ARGS)

# Adaptive group commit beside BookKeeper's fixed group wait: two pybkx bookies, one run.
bench-group-commit: venv deps build
	$(VPY) -m bench.group_commit $(BENCH_ARGS)

# The scrubber: add p99 with the default-rate scrub vs off, and unpaced scrub MB/s vs a
# sequential read of the same logs, one run.
bench-scrub: venv build
	$(VPY) bench/scrub.py $(BENCH_ARGS)

# A replica's digest for the cross-replica check: hashed in Rust beside the same in Python.
bench-replica-digest: venv build
	$(VPY) bench/replica_digest.py --json bench/results/replica_digest.json $(BENCH_ARGS)

# What metrics cost: a bookie with them beside one without, rounds interleaved.
bench-metrics: venv build
	$(VPY) bench/metrics_overhead.py $(BENCH_ARGS)

# This tree beside another build of pybkx (OTHER=path of a built source tree) and the Java bookie.
OTHER ?=
bench-builds: venv deps build $(BENCH_STAMP)
	@test -n "$(OTHER)" || { echo "usage: make bench-builds OTHER=/path/to/other/pybkx/tree"; exit 2; }
	$(VPY) -m bench.builds --other "$(OTHER)" $(BENCH_ARGS)

# Iteration and batch_read over a striped ledger beside an E == Qw one, same run (sandbox bookies).
bench-striped: venv deps build
	$(VPY) bench/striped_reads.py $(BENCH_ARGS)

# Read latency with one of three replicas paused 5 s in every 20 s: speculative reads and the
# read order by bookie health on and off, beside all replicas healthy, in one run.
bench-speculative: venv deps build
	$(VPY) bench/speculative_reads.py $(BENCH_ARGS)

bench-spark: venv deps build
	$(VPY) bench/spark_read.py $(BENCH_ARGS)

# Offload of closed ledgers to S3Proxy beside its own PUT rate; scans of the objects beside GET.
bench-offload: venv deps build s3-server
	$(VPY) -m bench.offload $(BENCH_ARGS)

bench-v3: venv deps build
	$(VPY) -m bench.v3_wire $(BENCH_ARGS)

bench-tls: venv deps build
	$(VPY) -m bench.tls $(BENCH_ARGS)

bench-noisy: venv deps build
	$(VPY) -m bench.noisy_neighbour $(BENCH_ARGS)

bench-recovery: venv deps build
	$(VPY) bench/recovery_speed.py $(BENCH_ARGS)

# Storage at scale: many entries indexed (ENTRIES, default 20 million), memory, restart, lookups.
ENTRIES ?= 20000000
bench-storage-scale: venv deps build
	$(VPY) -m bench.storage_scale --entries $(ENTRIES) $(BENCH_ARGS)

# A ledger written interleaved with 100 others, read back cold, beside the disk's own speed;
# then the same over the wire beside the Java bookie's DbLedgerStorage.
bench-cold-read: venv deps build
	$(VPY) -m bench.cold_read $(BENCH_ARGS)
	$(VPY) -m bench.cold_read --journal-dir /dev/shm $(BENCH_ARGS)

# Entry-log GC after 10,000 deleted ledgers, and a major compaction beside the disk's write limit.
bench-gc: venv deps build
	$(VPY) -m bench.gc_compaction $(BENCH_ARGS)

# Adds with demotion running (a small top tier, the mover paced) beside adds without, same run.
bench-tiers: venv deps build
	$(VPY) -m bench.tier_moves $(BENCH_ARGS)

# Large adds (16 KiB over 16 ledgers; BENCH_ARGS="--count 80000" for longer runs) beside the
# Java bookie, with the disk's write limit measured in each round.
bench-large-adds: venv deps build $(BENCH_STAMP)
	$(VPY) -m bench.large_adds $(BENCH_ARGS)

# Sustained adds on one bookie (OTHER=tree runs another build's bookie instead).
bench-sustained-adds: venv deps build
	$(VPY) -m bench.sustained_adds $(if $(OTHER),--other $(OTHER)) $(BENCH_ARGS)

# Synchronous adds on a bookie whose journal has cycled, journal files reused against created.
bench-journal-reuse: venv deps build
	$(VPY) -m bench.journal_reuse $(BENCH_ARGS)

bench-cold-read-java: venv deps build $(BENCH_STAMP)
	$(VPY) -m bench.cold_read_java $(BENCH_ARGS)

# The long fuzzing run (the default test run does a short one). PYBKX_FUZZ_ITERATIONS,
# PYBKX_FUZZ_TARGETS and PYBKX_FUZZ_SEED are passed through.
fuzz: venv
	$(CARGO_TEST_ENV) cargo test --release -p pybkx-core --all-features fuzz::tests::long_fuzz_run \
	    -- --ignored --nocapture

clean:
	cargo clean
	rm -f python/pybkx/*.so
	find $(PY_SOURCES) -name __pycache__ -type d -prune -exec rm -rf {} + 2>/dev/null || true
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis .benchmarks *.egg-info python/*.egg-info

distclean: clean
	rm -rf $(VENV)
