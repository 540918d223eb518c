"""JAAS login files for the SASL DIGEST-MD5 tests, in the form BookKeeper's MD5 tests write:
a bookie section of ``user_<name>="password"`` options and a client section of ``username``
and ``password``, both with ZooKeeper's DigestLoginModule."""

from __future__ import annotations

from pathlib import Path

__all__ = ["SASL_BOOKIE_FACTORY", "SASL_CLIENT_FACTORY", "write_jaas"]

SASL_BOOKIE_FACTORY = "org.apache.bookkeeper.sasl.SASLBookieAuthProviderFactory"
SASL_CLIENT_FACTORY = "org.apache.bookkeeper.sasl.SASLClientProviderFactory"
_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"


def write_jaas(
    path: Path,
    *,
    users: dict[str, str] | None = None,
    client: tuple[str, str] | None = None,
    bookie_section: str = "Bookie",
    client_section: str = "BookKeeper",
) -> Path:
    """Writes ``path``: a ``bookie_section`` with ``users`` (name -> password) and a
    ``client_section`` logging in as ``client`` (username, password), each when given."""
    parts: list[str] = []
    if users is not None:
        options = "\n".join(f'  user_{name}="{pw}"' for name, pw in users.items())
        parts.append(f"{bookie_section} {{\n  {_MODULE} required\n{options};\n}};\n")
    if client is not None:
        username, password = client
        parts.append(
            f"{client_section} {{\n  {_MODULE} required\n"
            f'  username="{username}"\n  password="{password}";\n}};\n'
        )
    path.write_text("\n".join(parts))
    return path
