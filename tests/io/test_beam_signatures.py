"""transforms/io/beam_signatures.py: the remembered signatures and DoFn specs equal Beam's
own, and a function or DoFn changed after its first use gets its new answer."""

from __future__ import annotations

import functools
import inspect

import apache_beam as beam
from apache_beam.transforms import core, ptransform, userstate
from apache_beam.typehints import decorators

from transforms.io import beam_signatures
from transforms.io.beam_signatures import RememberedSignatures, RememberedSpecs


def _plain(a, b=1, *rest, c, d=2, **more) -> int:
    return a


def _annotated(x: int, y: str = "y") -> str:
    return y


class _Fn(beam.DoFn):
    def process(self, element, side=beam.DoFn.SideInputParam, *args, **kwargs):
        yield element

    def start_bundle(self):
        pass

    @classmethod
    def build(cls, value=3):
        return value

    @staticmethod
    def helper(value):
        return value

    def varargs_only(*args):
        return args



def test_beam_calls_the_remembering_function_everywhere():
    remembered = decorators.get_signature
    assert isinstance(remembered, RememberedSignatures)
    assert core.get_signature is remembered and ptransform.get_signature is remembered
    beam_signatures.remember_signatures()  # a second call changes nothing
    assert decorators.get_signature is remembered


def test_every_kind_of_callable_gets_beams_signature():
    fn = _Fn()
    callables = [_plain, _annotated, lambda x, y=2: x, fn.process, fn.start_bundle,
                 _Fn.build, fn.helper, fn.varargs_only, _Fn.process,
                 functools.partial(_plain, 1, c=3), len, str.strip, _Fn, fn.with_input_types]
    remembered = RememberedSignatures(decorators.get_signature.compute)
    for func in callables:
        for _ in range(2):  # worked out, then remembered
            assert remembered(func) == decorators.get_signature.compute(func), func
    assert str(remembered(fn.process)) == str(inspect.signature(fn.process))
    assert core.get_function_args_defaults(fn.process)[0] == ["element", "side"]


def test_a_function_changed_after_its_first_use_gets_its_new_signature():
    def changing(a, b=1):
        return a

    remembered = RememberedSignatures(decorators.get_signature.compute)
    assert list(remembered(changing).parameters) == ["a", "b"]
    changing.__defaults__ = (5,)
    assert remembered(changing).parameters["b"].default == 5
    changing.__annotations__ = {"a": int}
    assert remembered(changing).parameters["a"].annotation is int
    changing.__signature__ = inspect.Signature([inspect.Parameter(
        "z", inspect.Parameter.POSITIONAL_OR_KEYWORD)])
    assert list(remembered(changing).parameters) == ["z"]
    changing.__code__ = (lambda p, q, r: p).__code__
    del changing.__signature__
    assert list(remembered(changing).parameters) == ["p", "q", "r"]


class _Stateful(beam.DoFn):
    COUNT = userstate.ReadModifyWriteStateSpec("count", beam.coders.VarIntCoder())
    ALARM = userstate.TimerSpec("alarm", userstate.TimeDomain.WATERMARK)

    def process(self, element, count=beam.DoFn.StateParam(COUNT),  # noqa: B008 (Beam's way)
                alarm=beam.DoFn.TimerParam(ALARM)):  # noqa: B008
        yield element

    @userstate.on_timer(ALARM)
    def ring(self):
        pass


def test_dofn_specs_equal_beams_and_follow_a_changed_dofn():
    compute = userstate.get_dofn_specs.compute
    assert isinstance(userstate.get_dofn_specs, RememberedSpecs)
    remembered = RememberedSpecs(compute)
    stateful, plain = _Stateful(), _Fn()
    for fn in (stateful, plain, stateful, plain):
        assert remembered(fn) == compute(fn)
    assert remembered(stateful)[0] == {_Stateful.COUNT}
    remembered(stateful)[0].clear()  # the caller gets a copy
    assert remembered(stateful)[0] == {_Stateful.COUNT}
    assert userstate.is_stateful_dofn(stateful) and not userstate.is_stateful_dofn(plain)
    # A bound method set on the object, or a method added to its class, is noticed.
    plain.extra = stateful.process
    assert remembered(plain)[0] == {_Stateful.COUNT}

    class Growing(beam.DoFn):
        def process(self, element):
            yield element

    growing = Growing()
    assert remembered(growing) == (set(), set())
    Growing.later = _Stateful.process
    assert remembered(growing)[0] == {_Stateful.COUNT}
