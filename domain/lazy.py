"""Package exports imported on first use, so importing a package costs nothing."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


def lazy_exports(
    package: str, namespace: dict[str, Any], homes: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """Return a package's `__getattr__` and `__dir__` for names kept in `homes`.

    `homes` maps each exported name to its module (absolute, or relative to
    `package` when it starts with a dot); a name is imported on first use and
    then kept in `namespace`, the package's globals.
    """

    def getattr_(name: str) -> object:
        home = homes.get(name)
        if home is None:
            msg = f"module {package!r} has no attribute {name!r}"
            raise AttributeError(msg)
        value = getattr(import_module(home, package), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *homes})

    return getattr_, dir_


__all__ = ["lazy_exports"]
