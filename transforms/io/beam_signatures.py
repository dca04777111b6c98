"""Beam's function signatures remembered: each function's signature worked out once.

Beam reads the signature of every method of every DoFn (`inspect.signature`, through
`apache_beam.typehints.decorators.get_signature`) several times per run: when a `ParDo` is
built, when the graph is checked, turned into its proto and checked for keyed input, and
again when each worker builds its bundle processors. For the scoring graph (65 ParDos,
about 35 methods each) that is thousands of signatures a run: a sixth of a 5-row run's
time in a profile. A function's signature is a pure function of the function object
(its code, defaults, annotations, and `__signature__` / `__wrapped__` when set), so
`get_signature` here keeps each plain function's signature, checked against those
attributes on every use, and gives a bound method its function's signature without the
bound first parameter, as `inspect.signature` does. Anything else (builtins, partials,
callable objects, classes) goes to Beam's own function unchanged.

Beam also works out a DoFn's state and timer parameters (`userstate.get_dofn_specs`: every
method of the DoFn wrapped and its defaults read) eight times per ParDo of a run, about a
millisecond each. `RememberedSpecs` keeps the answer per DoFn object while its class, the
number of attributes of each class in its method resolution order, and the bound methods
it holds itself are the ones it was worked out from (a class whose method is replaced in
place by another after one of its objects was checked is not noticed: state and timer
parameters are declared in `def` lines).

`remember_signatures` patches Beam's modules once per process, and importing this module
calls it; `transforms.io.counting`, which every DoFn module of the project imports, imports
it, so the launcher and every worker process use it.
"""

from __future__ import annotations

import inspect
import types
import weakref
from typing import Any

_APPLIED = "_qa_eval_remembered"
# The modules that call `get_signature` by the name they imported.
_CALLERS = ("apache_beam.typehints.decorators", "apache_beam.transforms.core",
            "apache_beam.transforms.ptransform", "apache_beam.transforms.util")


def _state(function: types.FunctionType) -> tuple:
    """What a function's signature depends on, compared by identity."""
    own = function.__dict__
    return (function.__code__, function.__defaults__, function.__kwdefaults__,
            function.__annotations__, own.get("__signature__"), own.get("__wrapped__"))


def identical(kept: tuple, state: tuple) -> bool:
    """Whether two states are the same objects, element by element."""
    return len(kept) == len(state) and all(a is b for a, b in zip(kept, state, strict=True))


class KeptWeakly:
    """What `compute` gave, kept weakly by the object it was asked about (`_kept`).

    Args:
        compute: Beam's function being remembered.
    """

    def __init__(self, compute: Any) -> None:
        self.compute = compute
        self._kept: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class RememberedSignatures(KeptWeakly):
    """`get_signature` with each plain function's signature kept (weakly, by function)."""

    def of_function(self, function: types.FunctionType) -> inspect.Signature:
        state = _state(function)
        kept = self._kept.get(function)
        if kept is not None and identical(kept[0], state):
            return kept[1]
        signature = self.compute(function)
        self._kept[function] = (state, signature)
        return signature

    def __call__(self, func: Any) -> inspect.Signature:
        if type(func) is types.FunctionType:
            return self.of_function(func)
        if type(func) is types.MethodType and type(func.__func__) is types.FunctionType:
            signature = self.of_function(func.__func__)
            parameters = list(signature.parameters.values())
            if parameters and parameters[0].kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                     inspect.Parameter.POSITIONAL_OR_KEYWORD):
                return signature.replace(parameters=parameters[1:])
            if parameters and parameters[0].kind is inspect.Parameter.VAR_POSITIONAL:
                return signature
        return self.compute(func)


def _dofn_state(dofn: Any) -> tuple:
    """What a DoFn object's state and timer specs depend on (see the module docstring)."""
    cls = type(dofn)
    return (cls, tuple(len(c.__dict__) for c in cls.__mro__),
            tuple(v for v in vars(dofn).values() if type(v) is types.MethodType))


class RememberedSpecs(KeptWeakly):
    """`get_dofn_specs` with each DoFn object's answer kept (weakly, by object)."""

    def __call__(self, dofn: Any) -> tuple[set, set]:
        try:
            state = _dofn_state(dofn)
            kept = self._kept.get(dofn)
        except TypeError:  # no __dict__, or unhashable: worked out every time
            return self.compute(dofn)
        if kept is None or kept[0][1] != state[1] or not identical(
                (kept[0][0], *kept[0][2]), (state[0], *state[2])):
            kept = (state, self.compute(dofn))
            self._kept[dofn] = kept
        states, timers = kept[1]
        return set(states), set(timers)


def remember_signatures() -> None:
    """Patches Beam's `get_signature` where it is called, and `userstate.get_dofn_specs`
    (once per process)."""
    import importlib

    from apache_beam.transforms import userstate
    from apache_beam.typehints import decorators

    if not getattr(userstate.get_dofn_specs, _APPLIED, False):
        specs = RememberedSpecs(userstate.get_dofn_specs)
        setattr(specs, _APPLIED, True)
        userstate.get_dofn_specs = specs
    if getattr(decorators.get_signature, _APPLIED, False):
        return
    remembered = RememberedSignatures(decorators.get_signature)
    setattr(remembered, _APPLIED, True)
    for name in _CALLERS:
        module = importlib.import_module(name)
        if hasattr(module, "get_signature"):
            module.get_signature = remembered


remember_signatures()
