"""Ember's own nested functions travel as a reference to their code (ember.code_refs):
closures, defaults, attributes and self-reference survive, no code object is pickled,
other modules' functions are cloudpickle's, and a process with different code says so."""
from __future__ import annotations

import operator
import pickle
import sys
import textwrap
import types

import cloudpickle
import pytest

from ember import code_refs
from ember.code_refs import _skeleton, reduce_nested
from ember.serializers import dumps_closure

SOURCE = textwrap.dedent('''
    def make(k, *, scale=2):
        later = None                      # a cell filled after the nested function exists

        def nested(x, step=1):
            return nested_helper(x) * scale + k + step + (later or 0)

        def nested_helper(x):
            return x if x < 10 else nested_helper(x - 10)   # refers to its own cell
        nested.tag = "kept"
        return nested

    class Holder:
        @staticmethod
        def build(m):
            empty_cell_user = lambda: missing     # noqa: E731 - a cell never filled
            if False:
                missing = 0
            return (lambda x: x * m), empty_cell_user
''')


@pytest.fixture
def ember_module():
    """A module that counts as Ember's own (its name starts with "ember.")."""
    module = types.ModuleType("ember._code_refs_probe")
    exec(compile(SOURCE, "<code_refs_probe>", "exec"), module.__dict__)
    sys.modules[module.__name__] = module
    try:
        yield module
    finally:
        del sys.modules[module.__name__]
        code_refs._indexes.pop(module.__name__, None)       # its code objects die with it
        for key in [k for k in code_refs._resolved if k[0] == module.__name__]:
            del code_refs._resolved[key]


def test_nested_function_round_trip_without_its_code(ember_module):
    f = ember_module.make(5)
    blob = dumps_closure(f)
    assert b"CodeType" not in blob and b"_make_function" not in blob
    g = pickle.loads(blob)
    assert g is not f and g.__code__ is f.__code__       # this process's own code object
    assert [g(x) for x in (3, 27)] == [f(3), f(27)] == [3 * 2 + 5 + 1, 7 * 2 + 5 + 1]
    assert g.tag == "kept" and g.__defaults__ == (1,) and g.__qualname__ == f.__qualname__
    times, empty_user = ember_module.Holder.build(4)
    times2, empty2 = pickle.loads(dumps_closure((times, empty_user)))
    assert times2(3) == 12
    with pytest.raises(NameError):                         # the empty cell stayed empty
        empty2()


def test_only_embers_nested_functions_go_by_reference(ember_module):
    def local(x):
        return x
    assert reduce_nested(local) is None                    # a test module's function
    assert reduce_nested(ember_module.make) is None        # module level: not nested
    blob = dumps_closure(local)
    assert pickle.loads(blob)(7) == 7


def test_a_different_ember_on_the_receiving_side_is_named(ember_module):
    f = ember_module.make(1)
    _fn, args, *_ = reduce_nested(f)
    modname, qualname, path, name, line, ncells = args
    with pytest.raises(ImportError, match="differs from the driver's"):
        _skeleton(modname, qualname, path, name, line + 1, ncells)


def test_ember_jobs_ship_no_nested_function_by_value(fresh_sc, monkeypatch):
    """Every nested function a shuffle, a join, take and mapValues build is Ember's: none
    goes through cloudpickle's by-value path, and the answers are unchanged."""
    by_value = []
    original = cloudpickle.Pickler._dynamic_function_reduce

    def spy(self, func):
        by_value.append(func.__qualname__)
        return original(self, func)
    monkeypatch.setattr(cloudpickle.Pickler, "_dynamic_function_reduce", spy)
    sc = fresh_sc("local[2]")
    pairs = sc.parallelize([(i % 3, i) for i in range(30)], 2)
    assert sorted(pairs.reduceByKey(operator.add).collect()) == [(0, 135), (1, 145), (2, 155)]
    assert sorted(pairs.groupByKey().mapValues(sorted).collect())[0] == (0, list(range(0, 30, 3)))
    assert pairs.keys().distinct().count() == 3
    assert sorted(pairs.join(pairs.mapValues(str)).collect())[0] == (0, (0, "0"))
    assert pairs.values().take(2) == [0, 1]
    assert [q for q in by_value if "<locals>" in q and not q.startswith("test_")] == []
