"""transforms/io/beam_signatures.py: the remembered signatures equal Beam's own, and a
function changed after its first use gets its new signature."""

from __future__ import annotations

import functools
import inspect

import apache_beam as beam
from apache_beam.transforms import core, ptransform
from apache_beam.typehints import decorators

from transforms.io import beam_signatures
from transforms.io.beam_signatures import RememberedSignatures


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
