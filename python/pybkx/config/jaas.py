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
through the key ``jaasConfigFile`` (the Java property's name is taken too), else
``$PYBKX_JAAS_CONFIG``. One file serves every section: the bookie's users, its clients'
credentials and ZooKeeper's ``Client`` login (pybkx.meta.zookeeper.auth). Only DIGEST-MD5
(ZooKeeper's DigestLoginModule) is implemented: a section naming another login module
(Kerberos) is refused. It reads one file and parses; it never opens a connection.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pybkx.config.values import ConfigError, InvalidValue

__all__ = [
    "DIGEST_LOGIN_MODULE",
    "JAAS_ENV",
    "JAAS_FILE_KEY",
    "JAVA_PROPERTY",
    "BookieSasl",
    "ClientSasl",
    "JaasEntry",
    "allowed_ids_pattern",
    "bookie_sasl",
    "client_sasl",
    "jaas_file",
    "parse_jaas",
    "read_section",
]

JAAS_FILE_KEY: Final = "jaasConfigFile"
"""The key naming the JAAS file (Java's system property ``java.security.auth.login.config``,
``JAVA_PROPERTY``, is taken as its other spelling)."""
JAVA_PROPERTY: Final = "java.security.auth.login.config"
"""The JVM system property a Java process is given the JAAS file with."""
JAAS_ENV: Final = "PYBKX_JAAS_CONFIG"
"""The environment variable naming the JAAS file when the key is unset (as a JVM's system
property is the whole process's: a sandbox's bookies and the shell started with it find it)."""
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
    r"""
    (?P<space>\s+)
  | (?P<line_comment>//[^\n]*)
  | (?P<block_comment>/\*.*?\*/)
  | (?P<quoted>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<punct>[{};=])
  | (?P<word>[^\s{};="']+)
    """,
    re.VERBOSE | re.DOTALL,
)


def _tokens(text: str, path: Path) -> list[tuple[str, int]]:
    """(token, line) pairs; quoted values unquoted (a backslash escapes the next character)."""
    out: list[tuple[str, int]] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        line = text.count("\n", 0, pos) + 1
        if match is None:
            raise ConfigError(f"JAAS file {path}:{line}: unterminated quote or comment")
        kind = match.lastgroup
        if kind == "quoted":
            out.append(("\0" + re.sub(r"\\(.)", r"\1", match.group()[1:-1]), line))
        elif kind in ("punct", "word"):
            out.append((match.group(), line))
        pos = match.end()
    return out


class _Parser:
    """A cursor over the tokens; every error names the file and line."""

    def __init__(self, tokens: list[tuple[str, int]], path: Path) -> None:
        self._tokens = tokens
        self._path = path
        self._at = 0

    def done(self) -> bool:
        return self._at >= len(self._tokens)

    def peek(self) -> str:
        return self._tokens[self._at][0] if not self.done() else ""

    def take(self, what: str) -> str:
        if self.done():
            raise ConfigError(f"JAAS file {self._path}: ends where {what} was expected")
        token, line = self._tokens[self._at]
        self._at += 1
        if token in ("{", "}", ";", "=") and what != token:
            raise ConfigError(f"JAAS file {self._path}:{line}: expected {what}, got {token!r}")
        if what in ("{", "}", ";", "=") and token != what:
            raise ConfigError(f"JAAS file {self._path}:{line}: expected {what!r}, got {token!r}")
        return token.removeprefix("\0")

    def module(self) -> JaasEntry:
        class_name = self.take("a login module class")
        flag = self.take("a control flag")
        if flag.lower() not in _FLAGS:
            raise ConfigError(
                f"JAAS file {self._path}: login module {class_name} has flag {flag!r}; "
                f"expected one of {', '.join(sorted(_FLAGS))}"
            )
        options: dict[str, str] = {}
        while self.peek() != ";":
            key = self.take("an option name")
            self.take("=")
            options[key] = self.take(f"the value of {key}")
        self.take(";")
        return JaasEntry(class_name, flag.lower(), options)


def parse_jaas(text: str, path: str | Path = "<jaas>") -> dict[str, list[JaasEntry]]:
    """The sections of a JAAS login file's text (Java's ConfigFile syntax:
    ``Name { module.Class flag key="value" ...; ...; };`` with ``//`` and ``/* */`` comments,
    names and values quoted with ``"`` or ``'``): name -> its login modules. Raises
    ConfigError naming ``path`` and the line for text that is not in that syntax."""
    parser = _Parser(_tokens(text, Path(path)), Path(path))
    sections: dict[str, list[JaasEntry]] = {}
    while not parser.done():
        name = parser.take("a section name")
        parser.take("{")
        modules: list[JaasEntry] = []
        while parser.peek() != "}":
            modules.append(parser.module())
        parser.take("}")
        parser.take(";")
        sections.setdefault(name, modules)  # the first of a repeated name, as Java reads it
    return sections


def read_section(path: str | Path, section: str) -> list[JaasEntry] | None:
    """The login modules of ``section`` in the JAAS file at ``path`` (names compared exactly, as
    Java does), or None when the file has no such section. Raises ConfigError when the file
    cannot be read or is not JAAS syntax (naming the line)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{JAAS_FILE_KEY} ({JAVA_PROPERTY}): cannot read the JAAS file {file}: {exc}"
        ) from None
    return parse_jaas(text, file).get(section)


def jaas_file(configured: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The JAAS file in use: the configured one, else ``$PYBKX_JAAS_CONFIG``, else None."""
    env = os.environ if environ is None else environ
    return configured or env.get(JAAS_ENV) or None


def _section(configured: str | None, section: str, key: str, what: str) -> list[JaasEntry]:
    file = jaas_file(configured)
    if file is None:
        raise ConfigError(
            f"{key} asks for SASL {what}, which needs {JAAS_FILE_KEY} (or ${JAAS_ENV}): the JAAS "
            f"login file with a {section!r} section"
        )
    entries = read_section(file, section)
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
