"""How the cross-replica check reaches the replicas: a bookie's digests through its admin
endpoint (``GET /api/v1/bookie/ledger_digest``), or from the local storage for the bookie
running the check; entries read and recovery adds sent through the bookie protocol. It moves
requests and answers; it never compares them (``recovery.cross_replica`` does).
"""

from __future__ import annotations

from collections.abc import Callable

from pybkx import errors
from pybkx._core import FLAG_RECOVERY_ADD, BookieClient, LedgerStorage, master_key
from pybkx.bookie.replica_check import RangeDigest, digest_path
from pybkx.meta import LedgerMetadata

__all__ = ["AdminReplicas", "local_digest", "parse_digest"]

#: How long one read or recovery add of a repair may take.
REPAIR_TIMEOUT_S = 10.0

AskBookie = Callable[[str, str, str], object]
"""``ask(bookie_id, method, path)``: the JSON a bookie's admin endpoint answers. Raises
OSError when the bookie publishes no endpoint, cannot be reached or refuses."""


def local_digest(
    storage: LedgerStorage, ledger_id: int, first: int, last: int, stride: int, listed: bool
) -> RangeDigest:
    """This bookie's digest of the range, from its storage (hashed in Rust)."""
    entries, size, unreadable, digest, listing = storage.replica_digest(
        ledger_id, first, last, stride, listed
    )
    return RangeDigest(
        entries,
        size,
        unreadable,
        digest.hex(),
        {e: d.hex() for e, d in listing} if listed else None,
    )


def parse_digest(answer: object) -> RangeDigest:
    """A digest endpoint's JSON answer. Raises OSError when it is not one."""
    try:
        if not isinstance(answer, dict):
            raise TypeError(type(answer).__name__)
        listed = answer.get("listed")
        return RangeDigest(
            int(answer["entries"]),
            int(answer["bytes"]),
            int(answer["unreadable"]),
            str(answer["digest"]),
            None if listed is None else {int(e): str(d) for e, d in listed},
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise OSError(f"unexpected ledger digest answer ({exc!r}): {answer!r}") from None


class AdminReplicas:
    """The replicas of a cluster: digests asked through ``ask`` (or answered by ``local``, the
    storage of ``local_id``, the bookie running the check), entries read and written through
    ``client`` at the addresses ``address_of`` gives."""

    def __init__(
        self,
        ask: AskBookie,
        client: BookieClient,
        address_of: Callable[[str], str],
        local: tuple[str, LedgerStorage] | None = None,
    ) -> None:
        self._ask = ask
        self._client = client
        self._address_of = address_of
        self._local = local

    def digest(
        self, bookie: str, ledger_id: int, first: int, last: int, stride: int, listed: bool
    ) -> RangeDigest:
        """Raises OSError when ``bookie`` cannot be asked."""
        if self._local is not None and bookie == self._local[0]:
            try:
                return local_digest(self._local[1], ledger_id, first, last, stride, listed)
            except errors.BKException as exc:
                raise OSError(f"the local storage cannot answer: {exc}") from None
        path = digest_path(ledger_id, first, last, stride, listed)
        return parse_digest(self._ask(bookie, "GET", path))

    def read(self, bookie: str, ledger_id: int, entry_id: int) -> bytes:
        """Raises BKException, TimeoutError."""
        data: bytes = self._client.read(self._address_of(bookie), ledger_id, entry_id).result(
            REPAIR_TIMEOUT_S
        )
        return data

    def write(
        self, bookie: str, ledger_id: int, entry_id: int, data: bytes, md: LedgerMetadata
    ) -> None:
        """Raises BKException, TimeoutError."""
        self._client.add(
            self._address_of(bookie),
            ledger_id,
            entry_id,
            master_key(md.password),
            data,
            FLAG_RECOVERY_ADD,
        ).result(REPAIR_TIMEOUT_S)
