"""Reading a placement policy's keys from a BookKeeper-style configuration mapping, with the
value parsers of ``pybkx.config`` (one set for the whole project). It never chooses bookies."""

from __future__ import annotations

from collections.abc import Mapping

from pybkx.config.values import ConfigError, InvalidValue, boolean, integer

__all__ = ["conf_bool", "conf_int", "conf_str"]


def conf_str(conf: Mapping[str, object], key: str, default: str | None = None) -> str | None:
    """``conf[key]`` as a stripped string; blank or absent gives ``default``."""
    value = conf.get(key)
    if value is None:
        return default
    text = str(value).strip()
    return text or default


def conf_bool(conf: Mapping[str, object], key: str, default: bool) -> bool:
    """``conf[key]`` as a boolean (true/false, yes/no, on/off, 1/0; blank or absent gives
    ``default``). Raises ConfigError."""
    value = conf.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    try:
        return boolean(value)
    except InvalidValue as exc:
        raise ConfigError(f"invalid {key}: {exc}") from None


def conf_int(conf: Mapping[str, object], key: str, default: int, minimum: int | None = None) -> int:
    """``conf[key]`` as an integer, at least ``minimum`` (blank or absent gives ``default``).
    Raises ConfigError."""
    value = conf.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    try:
        return integer(-(2**63) if minimum is None else minimum, 2**63 - 1)(value)
    except InvalidValue as exc:
        raise ConfigError(f"invalid {key}: {exc}") from None
