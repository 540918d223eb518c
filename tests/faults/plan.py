"""What a nemesis run is asked to do: the kinds of fault (a bookie's process or disk,
ZooKeeper, the network, every bookie's disk full) and ``RunConfig`` (how long, which seed, how
many bookies, writers and readers, which faults, the bookies' background work).

Owns values only: it never starts a process, injects a fault or touches a ledger, and imports
nothing of the suite, so the cluster, the workload and the nemesis all read it.
"""

from __future__ import annotations

from dataclasses import dataclass

PROCESS_FAULTS = ("kill", "pause", "disk_slow", "disk_error")
ZK_FAULTS = ("zk_pause", "zk_kill")
NET_FAULTS = ("partition", "zk_partition", "loss")
SPACE_FAULTS = ("disk_full",)
"""Faults over the whole cluster's disks: each bookie's journal and ledgers on a small tmpfs of
its own (root only)."""


@dataclass
class RunConfig:
    duration_s: float = 120.0
    seed: int = 1
    bookies: int = 5
    writers: int = 3
    readers: int = 2
    max_faulty: int = 1
    hold_s: tuple[float, float] = (0.5, 4.0)
    """How long a fault lasts."""
    gap_s: tuple[float, float] = (0.5, 2.5)
    """Time between two faults starting."""
    kinds: tuple[str, ...] = PROCESS_FAULTS + ZK_FAULTS
    net: bool = False
    """Bookies in network namespaces, and the network faults (root only)."""
    lifecycle: bool = True
    """A deleter removes closed ledgers (after reading them whole) while the bookies collect
    garbage and compact every few seconds."""
    autorecovery: bool = True
    """AutoRecovery in every bookie: a bookie whose registration lapses gets its ledgers
    re-replicated while it is away (open ledgers fenced after a short grace)."""
    disk_mib: int = 48
    """The size of each bookie's tmpfs when ``disk_full`` is among the kinds."""
    disk_full_every_s: float = 20.0
    """A ``disk_full`` round starts this often (the first after half of it) once no other
    fault holds a bookie or ZooKeeper; no other fault starts while it is due or under way."""
    writable_again_s: float = 30.0
    """The bound on each bookie's return to writable after a ``disk_full`` fault's deletes (a
    bounded wait, not a measurement: one bookie alone took 1.5 s)."""
