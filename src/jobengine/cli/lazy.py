"""Commands registered by name and imported when run: ``jobengine jobs list`` loads the jobs commands only,
not the packs' JSON Schema, the HTTP client or the scheduler's planner that other commands need.

Typer checks every parameter's value with a pydantic ``TypeAdapter``, built for each parameter of the command
that runs, given or not; importing pydantic for that is a third of a command's start-up. :func:`defer_checks`
keeps typer's checking but builds it only for a value that needs it: an option left out (None), a text
option given as text (the command line gives text, and a ``str`` parameter takes it as it is) and a number
default inside its bounds need none.

:class:`LazyGroup` is the root group of the command line. Its commands are :class:`LazyCommand` entries:
a name, where the command lives (``module:attribute``, a function or a ``typer.Typer`` group) and the
first paragraph of its help, which ``jobengine --help`` lists without importing the module. A unit test
checks each stored help against the command's own, so the two cannot drift apart.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import typer
import typer.core
import typer.main


@dataclass(frozen=True)
class LazyCommand:
    """A command of the root group: ``name``, ``target`` (``module:attribute``) and ``help``, the first
    paragraph of its help as ``jobengine --help`` lists it."""

    name: str
    target: str
    help: str

    def load(self) -> Any:
        """The command as typer builds it, the same as if it had been registered on the root app."""
        module, _, attribute = self.target.partition(":")
        obj = getattr(importlib.import_module(module), attribute)
        # A holder with the root's settings (plain help, no pretty tracebacks), so the command comes out as
        # it would from the root app: typer passes a group's markup mode down to its commands.
        holder = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False, add_completion=False)
        if isinstance(obj, typer.Typer):
            holder.add_typer(obj, name=self.name)
        else:
            holder.command(name=self.name)(obj)
        command = typer.main.get_group(holder).commands[self.name]
        defer_checks(command)
        return command


class _DeferredCheck:
    """Typer's check of one parameter's value (its ``RuntimeParam``), built on first need."""

    def __init__(self) -> None:
        self._check: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        descriptor = param.type_descriptor
        single = not param.multiple and param.nargs == 1
        if single and value is None:
            return None  # what typer's own check returns for a value not given
        info = descriptor.parameter_info
        if single and type(value) is descriptor.annotation and info.parser is None:
            if type(value) is str:
                return value
            if type(value) in (int, float) and _within(value, info.min, info.max):
                return value  # a number default of the command's own, inside its bounds
        if self._check is None:
            from typer._coercion import build_runtime_param

            self._check = build_runtime_param(descriptor)
        return self._check.coerce(value, param=param, ctx=ctx)


def _within(value: float, low: float | None, high: float | None) -> bool:
    return (low is None or value >= low) and (high is None or value <= high)


def _defer(param: Any) -> None:
    if getattr(param, "_runtime_param", False) is None and hasattr(param, "type_descriptor"):
        param._runtime_param = _DeferredCheck()


def defer_checks(command: Any) -> None:
    """Give each parameter of ``command`` (and of its subcommands), ``--help`` included, a
    :class:`_DeferredCheck`. A typer without the per-parameter checks this relies on is left as it is."""
    for param in command.params:
        _defer(param)
    help_option = command.get_help_option

    def get_help_option(ctx: Any) -> Any:  # made per context, after the command was built
        option = help_option(ctx)
        if option is not None:
            _defer(option)
        return option

    command.get_help_option = get_help_option
    for sub in getattr(command, "commands", {}).values():
        defer_checks(sub)


class _Commands(MutableMapping[str, Any]):
    """The root group's commands by name, in the order given; each one is built on first access."""

    def __init__(self, specs: Sequence[LazyCommand]) -> None:
        self.specs = {spec.name: spec for spec in specs}
        self._loaded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._loaded:
            self._loaded[name] = self.specs[name].load()  # KeyError for an unknown name, as a dict
        return self._loaded[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._loaded[name] = command
        if name not in self.specs:
            self.specs[name] = LazyCommand(name, "", command.help or "")

    def __delitem__(self, name: str) -> None:
        del self.specs[name]
        self._loaded.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)


class LazyGroup(typer.core.TyperGroup):
    """The root group: ``COMMANDS`` (set by a subclass) are imported when invoked; the help lists them from
    their stored help."""

    COMMANDS: tuple[LazyCommand, ...] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        defer_checks(self)  # before the commands are set: those are checked as they load
        self.commands = _Commands(self.COMMANDS)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        # As TyperGroup lists them, but from the stored help: listing must not import every command.
        specs = self.commands.specs if isinstance(self.commands, _Commands) else {}
        if not specs:
            return
        limit = formatter.width - 6 - max(len(name) for name in specs)
        rows = [(name, typer.core.TyperCommand(name=name, help=spec.help).get_short_help_str(limit))
                for name, spec in specs.items()]  # fmt: skip
        with formatter.section("Commands"):
            formatter.write_dl(rows)
