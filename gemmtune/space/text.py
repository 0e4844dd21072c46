"""Configurations written as text: ``NAME=VALUE,NAME=VALUE`` (``--config``, ``config:`` baselines)."""

from __future__ import annotations

from gemmtune.errors import GemmtuneError


def parse_config(text: str) -> dict:
    """``NAME=VALUE,NAME=VALUE`` -> dict; values are integers except KERNEL."""
    params = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise GemmtuneError(f"bad --config item {part!r}: expected NAME=VALUE")
        if name.upper() == "KERNEL":
            params["KERNEL"] = value
            continue
        try:
            params[name] = int(value)
        except ValueError:
            raise GemmtuneError(f"bad --config value {part!r}: {name} must be an integer") from None
    if not params:
        raise GemmtuneError("empty --config: expected NAME=VALUE,...")
    return params
