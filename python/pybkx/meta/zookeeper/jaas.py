"""Reading one section of a JAAS login configuration file, the file a JVM is given with
``-Djava.security.auth.login.config``: the login modules of the section, their flags and their
options. Pure parsing of the file's text; what a section means is the caller's business.

The syntax (Java's ConfigFile): ``Name { module.Class flag key="value" key2=value2; ...; };``
with ``//`` and ``/* */`` comments; quoted values may hold any character but an unescaped quote.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from pybkx.config.values import ConfigError

__all__ = ["LoginModule", "read_section"]

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<line_comment>//[^\n]*)
  | (?P<block_comment>/\*.*?\*/)
  | (?P<quoted>"(?:[^"\\]|\\.)*")
  | (?P<punct>[{};=])
  | (?P<word>[^\s{};="]+)
    """,
    re.VERBOSE | re.DOTALL,
)
_FLAGS = frozenset({"required", "requisite", "sufficient", "optional"})


@dataclass(frozen=True)
class LoginModule:
    """One entry of a section: ``class_name flag key=value ...;``."""

    class_name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


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

    def module(self) -> LoginModule:
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
        return LoginModule(class_name, flag.lower(), options)


def read_section(path: str | Path, section: str) -> list[LoginModule] | None:
    """The login modules of ``section`` in the JAAS file at ``path`` (names compared as Java
    does, exactly), or None when the file has no such section.

    Raises ConfigError when the file cannot be read or is not JAAS syntax (naming the line).
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the JAAS file {file}: {exc}") from None
    parser = _Parser(_tokens(text, file), file)
    found: list[LoginModule] | None = None
    while not parser.done():
        name = parser.take("a section name")
        parser.take("{")
        modules: list[LoginModule] = []
        while parser.peek() != "}":
            modules.append(parser.module())
        parser.take("}")
        parser.take(";")
        if name == section and found is None:
            found = modules
    return found
