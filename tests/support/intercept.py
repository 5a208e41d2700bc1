"""InterceptingFS: the real filesystem seam, with hooks a test sets per operation.

`InterceptingFS()` implements the `FileSystem` port (its operations and their
argument names are read off the port) by delegating every call to a real seam,
`OS_FILESYSTEM` unless told otherwise (a `CrashFS`, say). A test hooks
operations by name (one name, or several, e.g. `OPERATIONS`):

- `fs.before(ops, action)`: `action(call)` runs first; it may act (swap a file,
  wait on a `Gate`, count) or raise, which stands for the operation failing;
- `fs.after(ops, action)`: `action(call, result)` runs once the operation
  returned (not when it raised);
- `fs.around(ops, wrapper)`: `wrapper(call, proceed)` returns the result itself:
  `proceed()` performs the operation, `proceed(*args)` with other arguments
  (a short write, a shrunk read), or the wrapper never calls it;
- `fs.fail(ops, errno)`: raise `OSError(errno)` instead of the operation;
- `fs.watch(ops)`: only count the calls.

Each takes `when=` (a predicate on the `Call`, e.g. `named("x")`: only the
calls it accepts count), `nth=` (the first of those the hook acts on, from 1)
and `times=` (how many it acts on; default all from `nth`), and returns its
`Hook`, which counts the calls it matched (`hits`) and acted on (`fired`);
`hook.remove()`, or leaving `with hook:`, unhooks it. Hooks on one operation
nest in registration order, the first registered outermost.
`InterceptingFS(record=True)` (or the names of some operations) keeps each call
in `fs.calls`, with its result once it returned.

An operation with no hook and no recording is the inner seam's own function,
set on the instance: it costs what the production seam costs. The filesystem
pickles when its hooks do (module-level functions, or `named`, `fail`), so a
child process can be handed one.
"""

from __future__ import annotations

import errno
import inspect
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Self

from spillvault.adapters.storage.fs import OS_FILESYSTEM
from spillvault.domain.ports import FileSystem

from support.tiers import HANG_GUARD_SECONDS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from spillvault.domain.ports import StatResult

OPERATIONS: tuple[str, ...] = tuple(
    name
    for name, value in vars(FileSystem).items()
    if callable(value) and not name.startswith("_")
)
"""The operations of the `FileSystem` port, in its order."""

_PARAMETERS: dict[str, tuple[tuple[str, Any], ...]] = {
    op: tuple(
        (parameter.name, parameter.default)
        for parameter in list(
            inspect.signature(getattr(FileSystem, op)).parameters.values()
        )[1:]  # self
    )
    for op in OPERATIONS
}


@dataclass(eq=False)
class Call:
    """One call through the seam: the operation, its arguments and its result."""

    op: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    result: Any = None
    """What the operation returned (None until it returns, and if it raises)."""

    def __getitem__(self, name: str) -> Any:
        """Return the argument the port calls `name` (its default if not passed)."""
        for index, (parameter, default) in enumerate(_PARAMETERS[self.op]):
            if parameter == name:
                if index < len(self.args):
                    return self.args[index]
                return self.kwargs.get(name, default)
        msg = f"{self.op} has no argument {name!r}"
        raise KeyError(msg)

    @property
    def name(self) -> Any:
        """The entry the call names (`path`, or `src`); None for a descriptor call."""
        first = _PARAMETERS[self.op][0][0]
        return self[first] if first in {"path", "src"} else None


@dataclass(eq=False)
class Hook:
    """A registered hook: the calls it acts on; how many it matched and acted on."""

    fs: InterceptingFS = field(repr=False)
    ops: frozenset[str]
    kind: Literal["before", "after", "around"]
    action: Callable[..., Any]
    when: Callable[[Call], bool] | None = None
    nth: int = 1
    times: int | None = None
    hits: int = 0
    """Calls that matched `ops` and `when` while the hook was set."""
    fired: int = 0
    """Calls the hook acted on."""
    active: bool = True

    def remove(self) -> None:
        """Unhook: later calls no longer reach the hook (removing twice is harmless)."""
        self.fs._remove(self)

    def __enter__(self) -> Self:
        """Keep the hook for the `with` block."""
        return self

    def __exit__(self, *_: object) -> None:
        """Unhook at the end of the `with` block."""
        self.remove()

    def fires(self, call: Call) -> bool:
        """Count a call that reached the hook; say whether the hook acts on it."""
        if not self.active or (self.when is not None and not self.when(call)):
            return False
        with self.fs._mutex:
            self.hits += 1
            if self.hits < self.nth or (
                self.times is not None and self.fired >= self.times
            ):
                return False
            self.fired += 1
            return True


def _through(call: Call, hooks: tuple[Hook, ...], real: Callable[..., Any]) -> Any:
    """Run `call` through `hooks` (outermost first), then the real operation."""
    if not hooks:
        return real(*call.args, **call.kwargs)
    hook, inner = hooks[0], hooks[1:]
    if not hook.fires(call):
        return _through(call, inner, real)
    if hook.kind == "before":
        hook.action(call)
        return _through(call, inner, real)
    if hook.kind == "after":
        result = _through(call, inner, real)
        hook.action(call, result)
        return result

    def proceed(*args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs:
            return _through(call, inner, real)
        return _through(Call(call.op, args, kwargs), inner, real)

    return hook.action(call, proceed)


def _dispatcher(
    fs: InterceptingFS, op: str, real: Callable[..., Any], hooks: tuple[Hook, ...]
) -> Callable[..., Any]:
    """The operation `op` of `fs`: recorded if asked, through `hooks`, then `real`."""
    record = op in fs.recorded

    def dispatch(*args: Any, **kwargs: Any) -> Any:
        call = Call(op, args, kwargs)
        if record:
            fs.calls.append(call)
        call.result = result = _through(call, hooks, real)
        return result

    dispatch.__name__ = dispatch.__qualname__ = op
    return dispatch


def _nothing(call: Call) -> None:
    """A `before` action doing nothing (`watch`)."""


@dataclass(frozen=True)
class _Raise:
    """A `before` action raising `OSError(err)`."""

    err: int
    message: str | None = None

    def __call__(self, call: Call) -> NoReturn:
        raise OSError(self.err, self.message or os.strerror(self.err))


@dataclass(frozen=True)
class _Named:
    """A `when=` predicate: the call names one of `names`."""

    names: frozenset[Any]

    def __call__(self, call: Call) -> bool:
        return call.name in self.names


def named(*names: str) -> Callable[[Call], bool]:
    """Return a `when=` predicate: the call's `path` (or `src`) is one of `names`."""
    return _Named(frozenset(names))


class Gate:
    """A `before` action holding every call it gets until `release()` is called.

    `reached` is set once a call arrives, so a test knows the thread making it
    stands exactly there. A gate never released fails the call after `timeout`.
    """

    def __init__(self, timeout: float = HANG_GUARD_SECONDS) -> None:
        self.reached = threading.Event()
        self.released = threading.Event()
        self.timeout = timeout

    def __call__(self, call: Call) -> None:
        """Hold `call` until released."""
        self.reached.set()
        if not self.released.wait(self.timeout):
            msg = f"the test never released the gate held at {call.op}"
            raise TimeoutError(msg)

    def release(self) -> None:
        """Let every held call (and every later one) through."""
        self.released.set()


class InterceptingFS:
    """The `FileSystem` port over a real seam, with hooks per operation (see module)."""

    # Set per instance by `_install`: the inner seam's own function, or a dispatcher.
    open: Callable[..., int]
    close: Callable[..., None]
    read: Callable[..., bytes]
    pread: Callable[..., bytes]
    write: Callable[..., int]
    fsync: Callable[..., None]
    ftruncate: Callable[..., None]
    fstat: Callable[..., StatResult]
    fchmod: Callable[..., None]
    lstat: Callable[..., StatResult]
    mkdir: Callable[..., None]
    link: Callable[..., None]
    rename: Callable[..., None]
    unlink: Callable[..., None]
    rmdir: Callable[..., None]
    listdir: Callable[..., list[str]]
    flock: Callable[..., None]

    def __init__(
        self, inner: FileSystem = OS_FILESYSTEM, *, record: bool | Iterable[str] = False
    ) -> None:
        self.inner = inner
        recorded = OPERATIONS if record is True else () if record is False else record
        self.recorded = _operations(recorded)
        self.calls: list[Call] = []
        """The recorded calls, oldest first."""
        self._hooks: list[Hook] = []
        self._mutex = threading.Lock()
        self._install(OPERATIONS)

    # hooks ----------------------------------------------------------------------

    def before(
        self,
        ops: str | Iterable[str],
        action: Callable[[Call], object],
        *,
        when: Callable[[Call], bool] | None = None,
        nth: int = 1,
        times: int | None = None,
    ) -> Hook:
        """Run `action(call)` before the operation; it may act, or raise instead."""
        return self._add(ops, "before", action, when=when, nth=nth, times=times)

    def after(
        self,
        ops: str | Iterable[str],
        action: Callable[[Call, Any], object],
        *,
        when: Callable[[Call], bool] | None = None,
        nth: int = 1,
        times: int | None = None,
    ) -> Hook:
        """Run `action(call, result)` once the operation returned."""
        return self._add(ops, "after", action, when=when, nth=nth, times=times)

    def around(
        self,
        ops: str | Iterable[str],
        wrapper: Callable[[Call, Callable[..., Any]], Any],
        *,
        when: Callable[[Call], bool] | None = None,
        nth: int = 1,
        times: int | None = None,
    ) -> Hook:
        """Let `wrapper(call, proceed)` make the result; `proceed()` runs the op."""
        return self._add(ops, "around", wrapper, when=when, nth=nth, times=times)

    def watch(
        self,
        ops: str | Iterable[str],
        *,
        when: Callable[[Call], bool] | None = None,
    ) -> Hook:
        """Only count the matching calls (`hits`), acting on none."""
        return self.before(ops, _nothing, when=when)

    def fail(
        self,
        ops: str | Iterable[str],
        err: int = errno.EIO,
        *,
        message: str | None = None,
        when: Callable[[Call], bool] | None = None,
        nth: int = 1,
        times: int | None = None,
    ) -> Hook:
        """Raise `OSError(err, message)` instead of the operation."""
        return self.before(ops, _Raise(err, message), when=when, nth=nth, times=times)

    def clear(self) -> None:
        """Remove every hook (the recorded calls stay)."""
        for hook in list(self._hooks):
            hook.remove()

    # recording ------------------------------------------------------------------

    def names(self, op: str) -> list[Any]:
        """The first argument of each recorded call to `op` (a path op: the name)."""
        return [call.args[0] if call.args else None for call in self.calls_to(op)]

    def calls_to(self, op: str) -> list[Call]:
        """The recorded calls to `op`, oldest first."""
        return [call for call in self.calls if call.op == op]

    # machinery ------------------------------------------------------------------

    def _add(
        self,
        ops: str | Iterable[str],
        kind: Literal["before", "after", "around"],
        action: Callable[..., Any],
        *,
        when: Callable[[Call], bool] | None,
        nth: int,
        times: int | None,
    ) -> Hook:
        if nth < 1 or (times is not None and times < 1):
            msg = f"nth and times count from 1 (nth={nth}, times={times})"
            raise ValueError(msg)
        hook = Hook(self, _operations(ops), kind, action, when, nth, times)
        with self._mutex:
            self._hooks.append(hook)
            self._install(hook.ops)
        return hook

    def _remove(self, hook: Hook) -> None:
        with self._mutex:
            hook.active = False
            if hook in self._hooks:
                self._hooks.remove(hook)
                self._install(hook.ops)

    def _install(self, ops: Iterable[str]) -> None:
        """Bind each of `ops` to the inner seam's function, or to a dispatcher."""
        for op in ops:
            real = getattr(self.inner, op)
            hooks = tuple(hook for hook in self._hooks if op in hook.ops)
            if hooks or op in self.recorded:
                real = _dispatcher(self, op, real, hooks)
            setattr(self, op, real)

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the configuration; the bound operations are rebuilt on load."""
        skip = {*OPERATIONS, "_mutex"}
        return {key: value for key, value in vars(self).items() if key not in skip}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore the configuration and rebind every operation."""
        vars(self).update(state)
        self._mutex = threading.Lock()
        self._install(OPERATIONS)


def _operations(ops: str | Iterable[str]) -> frozenset[str]:
    """The operation names `ops` stands for, checked against the port."""
    names = frozenset([ops] if isinstance(ops, str) else ops)
    unknown = names - set(OPERATIONS)
    if unknown:
        msg = f"not operations of the FileSystem port: {sorted(unknown)}"
        raise ValueError(msg)
    return names


__all__ = ["OPERATIONS", "Call", "Gate", "Hook", "InterceptingFS", "named"]
