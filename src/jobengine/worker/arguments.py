"""How a task's parameters map to its job's payload, at enqueue and in the worker.

The payload of a task that declares parameters is one JSON object: each argument under its parameter's
name, positional arguments included (``send_welcome("ada@example.com", lang="en")`` is stored as
``{"email": "ada@example.com", "lang": "en"}``), so a producer in another language or over HTTP writes the
same object. Defaults are not stored: the worker applies the function's own. Extra keys go to a
``**kwargs`` parameter if there is one; a function that receives its context may read them through
``ctx.payload``; for any other function they are refused.

A parameter annotated with :class:`~jobengine.worker.context.JobContext` (or ``SyncJobContext``), or one
named ``ctx`` / ``context`` typed as nothing, ``Any`` or ``object`` (or anything, when it is the only
parameter), receives the job's context instead of an argument. A function
whose only parameters are such a context is a task written the original way: it is called with its
context and reads ``ctx.payload``, whatever shape the payload has.

A parameter annotated with a pydantic model is validated when the job is enqueued (a model or a dict is
accepted, its JSON form stored) and rebuilt from the payload in the worker; a model returned by a task is
stored as its JSON form. pydantic is looked up only if the task's module imported it.
"""

from __future__ import annotations

import functools
import inspect
import sys
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobengine.core.bounds import check_json
from jobengine.core.models import Json
from jobengine.errors import ConfigError, InvalidJob, NonRetryable
from jobengine.tasks import PhaseSpec, TaskFn, phase
from jobengine.worker.context import JobContext

_CONTEXT_NAMES = frozenset({"ctx", "context"})
_CONTEXT_TYPES = frozenset({"JobContext", "SyncJobContext"})


def _model(annotation: Any) -> Any:
    """The pydantic model class ``annotation`` is, or None (pydantic not imported means no model)."""
    pydantic = sys.modules.get("pydantic")
    if pydantic is None or not isinstance(annotation, type):
        return None
    return annotation if issubclass(annotation, pydantic.BaseModel) else None


def _is_context(param: inspect.Parameter, alone: bool) -> bool:
    """Whether ``param`` receives the context: typed as one, or named ``ctx`` / ``context`` and typed as
    anything a context is (``Any``, ``object``, nothing); a lone parameter so named whatever its type (a
    task written the original way), unless it is a pydantic model."""
    ann = param.annotation
    named = param.name in _CONTEXT_NAMES
    if isinstance(ann, str):  # not resolvable (a name imported under TYPE_CHECKING): go by its spelling
        return ann.rpartition(".")[2] in _CONTEXT_TYPES or (named and (alone or ann in ("Any", "object")))
    if ann is inspect.Parameter.empty or ann is typing.Any:
        return named
    if isinstance(ann, type) and issubclass(ann, JobContext):
        return True
    if not named or _model(ann) is not None:
        return False
    return alone or (isinstance(ann, type) and issubclass(JobContext, ann))


def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    try:
        return inspect.signature(fn, eval_str=True)
    except NameError:  # ``from __future__ import annotations`` with a name only the type checker sees
        return inspect.signature(fn)


@dataclass(frozen=True, slots=True)
class _Param:
    name: str
    kind: inspect._ParameterKind
    required: bool
    model: Any  # a pydantic model class, or None
    context: bool


@dataclass(frozen=True, slots=True)
class Parameters:
    """The parameters of one task function: which are arguments, which receive the context."""

    task: str
    params: tuple[_Param, ...]
    var_keyword: bool
    signature: inspect.Signature  # the arguments only, as a caller of ``enqueue`` passes them
    # Derived once here, not per job:
    names: frozenset[str] = field(init=False)  # the arguments' names
    required: tuple[str, ...] = field(init=False)
    models: Mapping[str, Any] = field(init=False)  # argument name -> its pydantic model
    var_name: str | None = field(init=False)  # the name of ``**kwargs`` in the signature
    open_keys: bool = field(init=False)  # keys beyond the arguments are allowed

    def __post_init__(self) -> None:
        arguments = [p for p in self.params if not p.context]
        set_ = object.__setattr__
        set_(self, "names", frozenset(p.name for p in arguments))
        set_(self, "required", tuple(p.name for p in arguments if p.required))
        set_(self, "models", {p.name: p.model for p in arguments if p.model is not None})
        kinds = ((p.name, p.kind) for p in self.signature.parameters.values())
        set_(self, "var_name", next((n for n, k in kinds if k is inspect.Parameter.VAR_KEYWORD), None))
        # A function that receives its context may read more of the payload through ``ctx.payload``.
        set_(self, "open_keys", self.var_keyword or any(p.context for p in self.params))

    @classmethod
    def of(cls, task: str, fn: Callable[..., Any]) -> Parameters:
        """ConfigError for a ``*args`` parameter: a JSON object has no place for unnamed arguments."""
        sig = _signature(fn)
        params: list[_Param] = []
        arguments: list[inspect.Parameter] = []
        var_keyword = False
        alone = len(sig.parameters) == 1
        for p in sig.parameters.values():
            if p.kind is p.VAR_POSITIONAL:
                raise ConfigError(f"task {task!r}: *{p.name} cannot be stored by name; take a list parameter")
            context = _is_context(p, alone)
            if p.kind is p.VAR_KEYWORD:
                var_keyword = True
            else:
                params.append(_Param(p.name, p.kind, p.default is p.empty, _model(p.annotation), context))
            if not context:
                arguments.append(p)
        return cls(task, tuple(params), var_keyword, sig.replace(parameters=arguments))

    @classmethod
    def union(cls, task: str, phases: Sequence[Parameters]) -> Parameters:
        """The arguments of a task made of phases: every argument a phase names, each keyword-only (a
        phase's order says nothing about the others'), required when some phase requires it."""
        merged: dict[str, _Param] = {}
        for each in phases:
            for p in each.params:
                if p.context:
                    continue
                seen = merged.get(p.name)
                merged[p.name] = _Param(p.name, inspect.Parameter.KEYWORD_ONLY,
                                        p.required or (seen is not None and seen.required),
                                        p.model if seen is None else seen.model, False)  # fmt: skip
        var_keyword = any(each.var_keyword for each in phases)
        keyword = inspect.Parameter.KEYWORD_ONLY
        arguments = [
            inspect.Parameter(p.name, keyword, default=inspect.Parameter.empty if p.required else None)
            for p in merged.values()
        ]
        contexts = [p for each in phases for p in each.params if p.context][:1]  # some phase reads ctx.payload
        if var_keyword:
            arguments.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD))
        return cls(task, (*merged.values(), *contexts), var_keyword, inspect.Signature(arguments))

    @property
    def takes_arguments(self) -> bool:
        """False for a task written the original way (its context only, or nothing)."""
        return self.var_keyword or any(not p.context for p in self.params)

    def payload(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Json]:
        """The payload of a call of the task with these arguments: TypeError naming a missing or unknown
        parameter, InvalidJob naming a parameter whose value is not JSON or fails its model."""
        if not self.var_keyword and (unknown := sorted(kwargs.keys() - self.names)):
            raise TypeError(f"{self.task}: got an unexpected keyword argument {unknown[0]!r}")
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.task}: {exc}") from None
        payload: dict[str, Json] = {}
        for name, value in bound.arguments.items():
            if name == self.var_name:
                for key, extra in value.items():
                    payload[key] = check_json(key, extra)
            else:
                payload[name] = _encode(name, value, self.models.get(name))
        return payload

    def problem(self, payload: Json, others: frozenset[str] = frozenset()) -> tuple[str, str] | None:
        """Why ``payload`` cannot be this function's arguments, as (field, message), or None when it can
        (``others``: keys other phases of the task take). Values are checked by the function's models in
        the worker, not here."""
        if payload is None:
            payload = {}
        if not isinstance(payload, dict):
            if self.required or not any(p.context for p in self.params):
                return "payload", f"task {self.task!r} takes named arguments, so a JSON object"
            payload = {}  # defaults only: the function reads the payload through its context
        for name in self.required:
            if name not in payload:
                return f"payload.{name}", f"missing argument {name!r} of task {self.task!r}"
        if not self.open_keys and not payload.keys() <= self.names:
            unknown = [k for k in payload if k not in self.names and k not in others]
            if unknown:
                return f"payload.{unknown[0]}", f"task {self.task!r} has no parameter {unknown[0]!r}"
        return None

    def check(self, payload: Json, others: frozenset[str] = frozenset()) -> None:
        """InvalidJob naming the field when ``payload`` cannot be the arguments (an enqueue by name)."""
        if (problem := self.problem(payload, others)) is not None:
            raise InvalidJob(*problem)

    def call(self, payload: Json, ctx: JobContext, others: frozenset[str]) -> tuple[list[Any], dict[str, Any]]:
        """The arguments of the function for this payload. NonRetryable naming the parameter when the
        payload cannot be the function's arguments: no attempt can change that."""
        if (problem := self.problem(payload, others)) is not None:
            raise NonRetryable(f"{problem[0]}: {problem[1]}")
        values: dict[str, Any] = payload if isinstance(payload, dict) else {}
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for p in self.params:
            if p.context:
                value: Any = ctx
            elif p.name in values:
                value = _decode(p.name, values[p.name], p.model)
            else:
                continue
            if p.kind is inspect.Parameter.POSITIONAL_ONLY:
                args.append(value)
            else:
                kwargs[p.name] = value
        if self.var_keyword:
            kwargs.update((k, v) for k, v in values.items() if k not in self.names)
        return args, kwargs


def _encode(name: str, value: Any, model: Any) -> Json:
    if model is not None:
        pydantic = sys.modules["pydantic"]
        try:
            value = model.model_validate(value)
        except pydantic.ValidationError as exc:
            raise InvalidJob(name, _first_error(exc)) from None
        return typing.cast(Json, value.model_dump(mode="json"))
    if _model(type(value)) is not None:  # a model passed to a parameter typed otherwise: its JSON form
        return typing.cast(Json, value.model_dump(mode="json"))
    return typing.cast(Json, check_json(name, value))


def _decode(name: str, value: Json, model: Any) -> Any:
    if model is None:
        return value
    pydantic = sys.modules["pydantic"]
    try:
        return model.model_validate(value)
    except pydantic.ValidationError as exc:
        raise NonRetryable(f"payload: {name}: {_first_error(exc)}") from None


def _first_error(exc: Any) -> str:
    errors = exc.errors()
    if not errors:
        return str(exc)
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    return f"{where}: {first.get('msg')}" if where else str(first.get("msg"))


def result_json(value: Any) -> Any:
    """A task's return value as it is stored: a pydantic model as its JSON form, the rest as it is."""
    if _model(type(value)) is not None:
        return value.model_dump(mode="json")
    return value


def adapt(task: str, fn: Callable[..., Any], others: frozenset[str] = frozenset()) -> Callable[[Any], Any]:
    """``fn`` as the worker calls a task, ``fn(ctx)``: the original function for a task written that way,
    else a function that takes its arguments from the payload (async if ``fn`` is)."""
    params = Parameters.of(task, fn)
    only = params.params[0] if len(params.params) == 1 and not params.var_keyword else None
    if only is not None and only.context and only.kind is not inspect.Parameter.KEYWORD_ONLY:
        return fn
    allowed = others | params.names
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def call_async(ctx: JobContext) -> Any:
            args, kwargs = params.call(ctx.payload, ctx, allowed)
            return result_json(await fn(*args, **kwargs))

        return call_async

    @functools.wraps(fn)
    def call(ctx: JobContext) -> Any:
        args, kwargs = params.call(ctx.payload, ctx, allowed)
        return result_json(fn(*args, **kwargs))

    return call


def adapt_task(
    task: str, fn: TaskFn | None, phases: Sequence[TaskFn | PhaseSpec] | None
) -> tuple[TaskFn | None, list[PhaseSpec] | None, Parameters]:
    """A task's function or phases as the worker calls them (:func:`adapt`), and the task's arguments (of
    every phase together). Both or neither given is left for ``tasks.make_spec`` to refuse."""
    if fn is not None and not phases:
        return adapt(task, fn), None, Parameters.of(task, fn)
    named = [p if isinstance(p, PhaseSpec) else phase(p.__name__, p) for p in phases or ()]
    params = Parameters.union(task, [Parameters.of(task, p.fn) for p in named])
    adapted = [PhaseSpec(p.name, adapt(task, p.fn, params.names), p.is_async) for p in named]
    return fn, adapted or None, params
