"""BookKeeper's SASL (DIGEST-MD5) settings: the keys of a bookie's and a client's configuration
and the JAAS login file they point at, read into what the Rust core authenticates with (the
bookie: its users and the allowed-ids pattern; the client: a username and a password).

The JAAS file has Java's login-configuration syntax, as BookKeeper's MD5 tests write it::

    Bookie {
      org.apache.zookeeper.server.auth.DigestLoginModule required
      user_bookkeeper-app="s3cret";
    };
    BookKeeper {
      org.apache.zookeeper.server.auth.DigestLoginModule required
      username="bookkeeper-app"
      password="s3cret";
    };

Java finds the file through the JVM system property ``java.security.auth.login.config``; pybkx
takes the same name as a configuration key. Only DIGEST-MD5 (ZooKeeper's DigestLoginModule) is
implemented: a section naming another login module (Kerberos) is refused. It reads one file
and parses; it never opens a connection.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pybkx.config.values import ConfigError, InvalidValue, optional_str, setting

__all__ = [
    "DIGEST_LOGIN_MODULE",
    "JAAS_FILE_KEY",
    "BookieSasl",
    "ClientSasl",
    "JaasEntry",
    "SaslKeys",
    "allowed_ids_pattern",
    "bookie_sasl",
    "client_sasl",
    "parse_jaas",
]

JAAS_FILE_KEY: Final = "java.security.auth.login.config"
"""The key naming the JAAS file (Java's system property of that name)."""
DIGEST_LOGIN_MODULE: Final = "org.apache.zookeeper.server.auth.DigestLoginModule"
"""The login module of DIGEST-MD5 credentials, as BookKeeper's tests and docs use it."""
_FLAGS: Final = frozenset({"required", "requisite", "sufficient", "optional"})
_USER_PREFIX: Final = "user_"


def allowed_ids_pattern(value: object) -> str:
    """``saslJaasClientAllowedIds``: a regular expression an authenticated id must match whole
    (Java's ``Pattern.matches``). Raises InvalidValue when it does not compile. The Rust core
    compiles it again (Rust's regex syntax, which has no look-around or back-references)."""
    text = str(value)
    try:
        re.compile(text)
    except re.error as exc:
        raise InvalidValue(f"{text!r} is not a regular expression: {exc}") from None
    return text


@dataclass(frozen=True)
class SaslKeys:
    """The SASL keys common to a bookie's and a client's configuration: a base of
    ``ServerConfig`` and ``ClientConfig`` (each adds its own section-name key)."""

    jaas_config_file: str | None = setting(JAAS_FILE_KEY, None, optional_str)
    """The JAAS login file the SASL sections are read from (Java: the JVM system property)."""


@dataclass(frozen=True)
class JaasEntry:
    """One login module line of a section: its class, flag and options."""

    module: str
    flag: str
    options: dict[str, str]


@dataclass(frozen=True)
class BookieSasl:
    """What the bookie authenticates clients with: the users (name -> password) and the
    ``saslJaasClientAllowedIds`` pattern."""

    users: dict[str, str]
    allowed_ids: str

    def __repr__(self) -> str:  # never the passwords
        return f"BookieSasl(users={sorted(self.users)}, allowed_ids={self.allowed_ids!r})"


@dataclass(frozen=True)
class ClientSasl:
    """What a client authenticates with."""

    username: str
    password: str

    def __repr__(self) -> str:  # never the password
        return f"ClientSasl(username={self.username!r})"


_TOKEN = re.compile(
    r"""\s+|//[^\n]*|/\*.*?\*/|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[{};=]|[^\s{};="']+""",
    re.DOTALL,
)


def _tokens(text: str, path: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ConfigError(f"{path}: cannot read the JAAS file at offset {pos}")
        tok = m.group()
        pos = m.end()
        if tok.isspace() or tok.startswith(("//", "/*")):
            continue
        out.append(tok)
    return out


def _unquote(tok: str) -> str:
    if len(tok) >= 2 and tok[0] == tok[-1] and tok[0] in "\"'":
        return re.sub(r"\\(.)", r"\1", tok[1:-1])
    return tok


def parse_jaas(text: str, path: str = "<jaas>") -> dict[str, list[JaasEntry]]:
    """The sections of a JAAS login file: name -> its login module entries. Raises ConfigError
    (naming ``path``) for a file that is not in Java's login-configuration syntax."""
    toks = _tokens(text, path)
    sections: dict[str, list[JaasEntry]] = {}
    i = 0

    def expect(what: str) -> str:
        nonlocal i
        if i >= len(toks):
            raise ConfigError(f"{path}: the JAAS file ends where {what} was expected")
        tok = toks[i]
        i += 1
        return tok

    while i < len(toks):
        name = _unquote(expect("a section name"))
        if expect("'{'") != "{":
            raise ConfigError(f"{path}: section {name!r} must open with '{{'")
        entries: list[JaasEntry] = []
        while (tok := expect("a login module or '}'")) != "}":
            entries.append(_entry(tok, expect, path, name))
        if i < len(toks) and toks[i] == ";":
            i += 1
        sections.setdefault(name, []).extend(entries)
    return sections


def _entry(module: str, expect: Callable[[str], str], path: str, section: str) -> JaasEntry:
    flag = expect("a control flag").lower()
    if flag not in _FLAGS:
        raise ConfigError(
            f"{path}: section {section!r}: {module} needs a control flag "
            f"({'/'.join(sorted(_FLAGS))}), got {flag!r}"
        )
    options: dict[str, str] = {}
    while (key := expect("an option or ';'")) != ";":
        if expect("'='") != "=":
            raise ConfigError(f"{path}: section {section!r}: option {key!r} needs '=value'")
        options[key] = _unquote(expect(f"the value of {key!r}"))
    return JaasEntry(module, flag, options)


def _section(file: str | None, section: str, key: str, what: str) -> list[JaasEntry]:
    if file is None:
        raise ConfigError(
            f"{key} asks for SASL {what}, which needs {JAAS_FILE_KEY} (the JAAS login file "
            f"with a {section!r} section)"
        )
    try:
        text = Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{JAAS_FILE_KEY}={file}: cannot read the JAAS file: {exc}") from None
    entries = parse_jaas(text, file).get(section)
    if not entries:
        raise ConfigError(
            f"{JAAS_FILE_KEY}={file} has no {section!r} section: SASL {what} cannot start"
        )
    for entry in entries:
        if entry.module != DIGEST_LOGIN_MODULE:
            raise ConfigError(
                f"{file}: section {section!r} uses {entry.module}; pybkx implements SASL "
                f"DIGEST-MD5 only ({DIGEST_LOGIN_MODULE}), not Kerberos/GSSAPI"
            )
    return entries


def bookie_sasl(file: str | None, section: str, allowed_ids: str) -> BookieSasl:
    """The bookie's users from ``section`` of the JAAS ``file`` (its ``user_<name>="password"``
    options, as BookKeeper's SaslServerState reads them). Raises ConfigError when the file or
    the section is missing or unreadable, a module is not DigestLoginModule, or there is no
    user (no client could ever authenticate)."""
    key = "bookieAuthProviderFactoryClass"
    users: dict[str, str] = {}
    for entry in _section(file, section, key, "client authentication"):
        for option, value in entry.options.items():
            if option.startswith(_USER_PREFIX) and len(option) > len(_USER_PREFIX):
                users[option[len(_USER_PREFIX) :]] = value
    if not users:
        raise ConfigError(
            f'{file}: section {section!r} names no user (user_<name>="password"): no client '
            "could authenticate"
        )
    return BookieSasl(users, allowed_ids)


def client_sasl(file: str | None, section: str) -> ClientSasl:
    """The client's ``username`` and ``password`` from ``section`` of the JAAS ``file`` (the
    first entry holding both, as DigestLoginModule reads them). Raises ConfigError when the
    file or section is missing or unreadable, a module is not DigestLoginModule, or no entry
    has both options."""
    key = "clientAuthProviderFactoryClass"
    for entry in _section(file, section, key, "authentication to the bookies"):
        username, password = entry.options.get("username"), entry.options.get("password")
        if username is not None and password is not None:
            return ClientSasl(username, password)
    raise ConfigError(f"{file}: section {section!r} has no username and password options")
