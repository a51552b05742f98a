"""From an ATen overload's arguments to a kernel wrapper's call (the OpInfo's call convention).

This module is copied verbatim into every exported package and into BackendBench's files, so it
imports nothing: the spec it reads is plain data the exporter wrote (``opforge_library.export``
builds and verifies it against the OpInfo's samples).

A spec is ``{"args": [ARG, ...]}`` in the schema's order, each ARG
``{"name", "kwarg_only", "tensor", "typed", "to"}`` plus ``"default"`` where the schema has
one: ``to`` is ``"pos"`` (passed positionally, in order), ``"kw"`` (passed by name), ``"drop"``
(the wrapper has no place for it: only its default can be honoured) or ``"dest"`` (an ``out=``
destination, which the runtime writes and the wrapper never sees). ``tensor`` marks the
schema's Tensor-typed arguments, which the dispatcher may hand over as Python numbers; ``typed``
the arguments whose dtypes (or Python number types) make a call's signature, the key under
which the exporter recorded what the judge's samples tested.
"""

from __future__ import annotations

_MISSING = object()


def same_value(value, default) -> bool:
    """Whether ``value`` is the schema's ``default`` (``True`` is not ``1``, a tensor never is)."""
    if isinstance(value, (list, tuple)) and isinstance(default, (list, tuple)):
        return len(value) == len(default) and all(map(same_value, value, default))
    if type(value) is bool or type(default) is bool:
        return type(value) is type(default) and value == default
    if value is None or default is None:
        return value is default
    if isinstance(value, (int, float, str)) and isinstance(default, (int, float, str)):
        return value == default
    return False


class Adapter:
    def __init__(self, spec: dict):
        self.args = spec["args"]
        self._positional = [arg for arg in self.args if not arg["kwarg_only"]]
        self._by_name = {arg["name"]: arg for arg in self.args}

    def bind(self, args: tuple, kwargs: dict) -> dict | None:
        """Every schema argument's value (defaults filled in), or None where ``args`` and
        ``kwargs`` do not fit the schema."""
        if len(args) > len(self._positional):
            return None
        bound = {arg["name"]: value for arg, value in zip(self._positional, args, strict=False)}
        for name, value in kwargs.items():
            if name not in self._by_name or name in bound:
                return None
            bound[name] = value
        for arg in self.args:
            if arg["name"] not in bound:
                if "default" not in arg:
                    return None
                bound[arg["name"]] = arg["default"]
        return bound

    def signature(self, bound: dict) -> str:
        """The dtypes of the typed arguments, e.g. ``float32,float32,py:int``."""
        return ",".join(
            _token(bound[arg["name"]]) for arg in self.args if arg["typed"] and arg["to"] != "dest"
        )

    def wrapper_call(self, bound: dict) -> tuple[list, dict] | str:
        """The wrapper's (args, kwargs) for ``bound``; or why it cannot be called: an argument
        it has no place for is not at its default."""
        call_args, call_kwargs = [], {}
        for arg in self.args:
            name, value = arg["name"], bound[arg["name"]]
            if arg["to"] == "dest":
                continue
            if arg["to"] == "pos":
                call_args.append(value)
            elif arg["to"] == "kw":
                call_kwargs[name] = value
            elif not same_value(value, arg.get("default", _MISSING)):
                return f"the wrapper has no place for {name}={value!r}"
        return call_args, call_kwargs


def _token(value) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + "|".join(sorted({_token(item) for item in value})) + "]"
    if value is None:
        return "none"
    dtype = getattr(value, "dtype", None)  # a tensor: no torch import here
    if dtype is not None:
        return str(dtype).removeprefix("torch.")
    return "py:" + type(value).__name__
