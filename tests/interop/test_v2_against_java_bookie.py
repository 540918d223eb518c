"""Apache BookKeeper's own V2 per-bookie client (BookieClientImpl) against a pybkx bookie and
against a real Java bookie, running the same script: every result must match the expectation,
and pybkx's results must equal the Java bookie's, rc for rc and byte for byte."""

from __future__ import annotations

from typing import Any

import pytest
from interop_scenario import Step, check, compare, scenario

pytestmark = pytest.mark.interop

DIGESTS = ["CRC32", "CRC32C", "HMAC"]
BOOKIES = ["java", "pybkx"]
FIXTURE = {"java": "java_bookie", "pybkx": "pybkx_bookie"}

Results = list[dict[str, Any]]


def steps_for(digest: str) -> list[Step]:
    # The same ledger ids on both bookies, so that their results are comparable.
    return scenario(digest, base=1000 * (DIGESTS.index(digest) + 1))


@pytest.fixture(scope="module")
def script_results(request: pytest.FixtureRequest, run_java_client: Any) -> Any:
    """``script_results(bookie, digest)``: the Java client's results of the script on that
    bookie, run once per module (the script is not idempotent: it fences ledgers)."""
    cache: dict[tuple[str, str], Results] = {}

    def results(bookie: str, digest: str) -> Results:
        if (bookie, digest) not in cache:
            address = request.getfixturevalue(FIXTURE[bookie])
            ops = [step.op for step in steps_for(digest)]
            cache[bookie, digest] = run_java_client(address, ops)
        return cache[bookie, digest]

    return results


@pytest.mark.parametrize("digest", DIGESTS)
@pytest.mark.parametrize("bookie", BOOKIES)
def test_java_client_script(bookie: str, digest: str, script_results: Any) -> None:
    problems = check(steps_for(digest), script_results(bookie, digest))
    if problems:
        pytest.fail(f"{bookie} bookie, {digest}:\n" + "\n".join(problems), pytrace=False)


@pytest.mark.parametrize("digest", DIGESTS)
def test_pybkx_bookie_identical_to_java_bookie(digest: str, script_results: Any) -> None:
    java, pybkx = script_results("java", digest), script_results("pybkx", digest)
    problems = compare("java", java, "pybkx", pybkx, steps_for(digest))
    if problems:
        pytest.fail(
            f"{digest}: pybkx differs from the Java bookie:\n" + "\n".join(problems), pytrace=False
        )
