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


class CallShape:
    """How the calls that pass ``count`` arguments by position and ``names`` by keyword map onto
    the schema and the wrapper: worked out once per shape, so that a call only indexes a list
    (the dispatcher passes a schema's arguments in its order, trailing defaults left out)."""

    def __init__(self, args: list[dict], count: int, names: tuple[str, ...]):
        positional = sum(not arg["kwarg_only"] for arg in args)
        index_of = {arg["name"]: index for index, arg in enumerate(args)}
        passed = set(names)
        self.fits = count <= positional and all(index_of.get(name, -1) >= count for name in names)
        #: The values of the arguments not passed by position: defaults, overwritten by keywords.
        self.tail = []
        for arg in args[count:]:
            if arg["name"] not in passed and "default" not in arg:
                self.fits = False
            self.tail.append(arg.get("default"))
        self.keyword_slots = tuple((index_of[name], name) for name in names if name in index_of)
        routed = [(index, arg) for index, arg in enumerate(args) if arg["to"] != "dest"]
        #: The arguments whose dtypes or number types make the call's signature.
        self.typed = tuple(index for index, arg in routed if arg["typed"])
        self.positional = tuple(index for index, arg in routed if arg["to"] == "pos")
        self.keywords = tuple((arg["name"], index) for index, arg in routed if arg["to"] == "kw")
        #: Arguments the wrapper has no place for that the call passed: they must be at default.
        self.dropped = tuple(
            (index, arg.get("default", _MISSING))
            for index, arg in routed
            if arg["to"] == "drop" and (index < count or arg["name"] in passed)
        )
        #: The wrapper takes the schema's arguments as they came: by position, all of them.
        self.as_passed = (
            not names
            and not self.tail
            and not self.keywords
            and not self.dropped
            and self.positional == tuple(range(count))
        )
        self.destination = next(
            (index for index, arg in enumerate(args) if arg["to"] == "dest"), None
        )
        #: The places in a signature of the typed arguments that are Tensors in the schema: the
        #: dispatcher may have handed them over as Python numbers.
        self.tensor_keys = tuple(
            place for place, index in enumerate(self.typed) if args[index]["tensor"]
        )

    def values(self, args: tuple, kwargs: dict) -> list:
        """Every schema argument's value, in the schema's order (for a shape that fits)."""
        values = [*args, *self.tail]
        for index, name in self.keyword_slots:
            values[index] = kwargs[name]
        return values

    def wrapper_call(self, values) -> tuple[list, dict] | None:
        """The wrapper's (args, kwargs), or None where an argument it has no place for is not at
        its default."""
        if self.as_passed:
            return values, {}
        for index, default in self.dropped:
            if not same_value(values[index], default):
                return None
        return [values[index] for index in self.positional], {
            name: values[index] for name, index in self.keywords
        }


class Adapter:
    def __init__(self, spec: dict):
        self.args = spec["args"]
        self._names = [arg["name"] for arg in self.args]
        #: The schema's arguments whose dtypes or number types make a signature, in its order.
        self.typed = tuple(
            index for index, arg in enumerate(self.args) if arg["typed"] and arg["to"] != "dest"
        )
        self._shapes: dict[object, CallShape] = {}

    def shape_of(self, args: tuple, kwargs: dict) -> CallShape:
        """The call's shape, worked out on its first call."""
        key = (len(args), *kwargs) if kwargs else len(args)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = CallShape(self.args, len(args), tuple(kwargs))
        return shape

    def bind(self, args: tuple, kwargs: dict) -> dict | None:
        """Every schema argument's value (defaults filled in), or None where ``args`` and
        ``kwargs`` do not fit the schema."""
        shape = self.shape_of(args, kwargs)
        if not shape.fits:
            return None
        return dict(zip(self._names, shape.values(args, kwargs), strict=True))

    def signature(self, bound: dict) -> str:
        """The dtypes of the typed arguments, e.g. ``float32,float32,py:int``."""
        return ",".join(_token(bound[self._names[index]]) for index in self.typed)

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
