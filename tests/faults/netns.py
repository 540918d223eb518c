"""Real network partitions inside this machine for the nemesis: each bookie in a network
namespace of its own, joined by a veth pair to a bridge in the root namespace, where ZooKeeper
(on the bridge's address) and the clients (the test process) live.

- ``cut``/``mend``: the bookie's link goes down/up: clients and ZooKeeper lose it (connections
  hang, no reset), as a pulled cable.
- ``block_zk``: with nftables, the bookie loses ZooKeeper only (clients still reach it).
- ``lose``: with nftables, a share of the bookie's packets both ways is dropped.
(``tc netem`` delay is not used: this kernel has no netem qdisc.)

Needs root and ``ip netns``; ``Network.unavailable()`` says why not, so callers skip clearly.
nftables comes from Debian's package (``make faults-deps``).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess

__all__ = ["Network"]

COMMAND_TIMEOUT_S = 10.0


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=check
    )


class Network:
    """Namespaces, veth pairs, a bridge and (when nft exists) a filter table, all named with a
    random tag so that runs never collide; ``destroy`` removes everything."""

    def __init__(self, count: int) -> None:
        self.tag = f"{random.randrange(16**4):04x}"
        self.subnet = f"10.{random.randrange(100, 250)}.{random.randrange(0, 250)}"
        self.count = count
        self.bridge = f"pbx{self.tag}br"
        self.table = f"pbx{self.tag}"
        self.has_nft = shutil.which("nft") is not None

    # --- life cycle

    @staticmethod
    def unavailable() -> str | None:
        """Why namespaces cannot be used here (None: they can)."""
        if os.geteuid() != 0:
            return "network partitions need root (ip netns, veth pairs)"
        if shutil.which("ip") is None:
            return "network partitions need iproute2's ip"
        name = f"pbxprobe{os.getpid()}"
        try:
            _run("ip", "netns", "add", name)
        except (subprocess.SubprocessError, OSError) as exc:
            return f"ip netns is not permitted here: {exc}"
        _run("ip", "netns", "del", name, check=False)
        return None

    @classmethod
    def create(cls, count: int) -> Network:
        reason = cls.unavailable()
        if reason is not None:
            raise RuntimeError(reason)
        net = cls(count)
        try:
            net._build()
        except BaseException:
            net.destroy()
            raise
        return net

    def _build(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.zk_host}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for i in range(self.count):
            ns, host, inside = self.namespace(i), self._host_if(i), self._ns_if(i)
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", host, "type", "veth", "peer", "name", inside)
            _run("ip", "link", "set", inside, "netns", ns)
            _run("ip", "link", "set", host, "master", self.bridge, "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.bookie_address(i)}/24", "dev", inside)
            _run("ip", "-n", ns, "link", "set", inside, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        if self.has_nft:
            _run("nft", "add", "table", "inet", self.table)
            for hook in ("input", "output"):
                _run(
                    "nft", "add", "chain", "inet", self.table, hook,
                    f"{{ type filter hook {hook} priority 0 ; policy accept ; }}",
                )  # fmt: skip
            for i in range(self.count):
                for way, hook, field in (("in", "input", "saddr"), ("out", "output", "daddr")):
                    chain = f"b{i}{way}"
                    _run("nft", "add", "chain", "inet", self.table, chain)
                    _run(
                        "nft", "add", "rule", "inet", self.table, hook,
                        "ip", field, self.bookie_address(i), "jump", chain,
                    )  # fmt: skip

    def destroy(self) -> None:
        """Remove every namespace, link and table of this network (errors ignored)."""
        if self.has_nft:
            _run("nft", "delete", "table", "inet", self.table, check=False)
        for i in range(self.count):
            _run("ip", "link", "del", self._host_if(i), check=False)
            _run("ip", "netns", "del", self.namespace(i), check=False)
        _run("ip", "link", "del", self.bridge, check=False)

    # --- addresses

    @property
    def zk_host(self) -> str:
        return f"{self.subnet}.1"

    def bookie_address(self, i: int) -> str:
        return f"{self.subnet}.{10 + i}"

    def namespace(self, i: int) -> str:
        return f"pbx{self.tag}-{i}"

    def _host_if(self, i: int) -> str:
        return f"pbx{self.tag}h{i}"

    def _ns_if(self, i: int) -> str:
        return f"pbx{self.tag}n{i}"

    def exec_argv(self, i: int, argv: list[str]) -> list[str]:
        """``argv`` run inside bookie ``i``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(i), *argv]

    # --- faults

    def cut(self, i: int) -> None:
        _run("ip", "link", "set", self._host_if(i), "down")

    def mend(self, i: int) -> None:
        _run("ip", "link", "set", self._host_if(i), "up")

    def block_zk(self, i: int, zk_port: int) -> None:
        self._need_nft()
        _run(
            "nft",
            "add",
            "rule",
            "inet",
            self.table,
            f"b{i}in",
            "tcp",
            "dport",
            str(zk_port),
            "drop",
        )
        _run(
            "nft",
            "add",
            "rule",
            "inet",
            self.table,
            f"b{i}out",
            "tcp",
            "sport",
            str(zk_port),
            "drop",
        )

    def lose(self, i: int, percent: int) -> None:
        self._need_nft()
        for way in ("in", "out"):
            _run(
                "nft", "add", "rule", "inet", self.table, f"b{i}{way}",
                "numgen", "random", "mod", "100", "<", str(percent), "drop",
            )  # fmt: skip

    def unblock(self, i: int) -> None:
        if self.has_nft:
            for way in ("in", "out"):
                _run("nft", "flush", "chain", "inet", self.table, f"b{i}{way}", check=False)

    def _need_nft(self) -> None:
        if not self.has_nft:
            raise RuntimeError("nftables is not installed (make faults-deps)")
