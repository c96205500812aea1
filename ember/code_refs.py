"""Ember's own nested functions pickled as a reference to their code, not the code itself.

reduceByKey, groupByKey, mapValues, join, take and the rest wrap the user's functions in
functions nested in Ember's methods. cloudpickle ships every nested function by value: its
code object (bytecode, constants, names, line table) and the globals it reads, on every
job, and each task process rebuilds them. The task processes run the same Ember, so the
code object is already there: such a function goes as (module, qualified name of the
top-level function that holds it, the path of indices through nested co_consts) plus its
closure cells, defaults and attributes, and is rebuilt around the receiver's own code
object with its module's globals. A function whose code cannot be found that way (made by
exec, or in a module Ember does not own) is left to cloudpickle.
"""
from __future__ import annotations

import sys
import types
from typing import Any, Optional

# module name -> {id(code): (code, (top-level qualname, index path))}; built once per module
_indexes: dict[str, dict[int, tuple[types.CodeType, tuple[str, tuple[int, ...]]]]] = {}
# (module, qualname, path) -> code, on the receiving side
_resolved: dict[tuple[str, str, tuple[int, ...]], types.CodeType] = {}


class _EmptyCell:
    """Stands for a closure cell with nothing in it yet (the class pickles by reference,
    so the receiver sees the same object)."""


def _top_level_functions(module: types.ModuleType) -> list[tuple[str, types.FunctionType]]:
    """(qualname, function) of the module's own functions and its classes' methods."""
    out = []
    for name, value in vars(module).items():
        if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
            out.append((name, value))
        elif isinstance(value, type) and value.__module__ == module.__name__:
            for attr, member in vars(value).items():
                member = getattr(member, "__func__", member)    # staticmethod, classmethod
                if isinstance(member, types.FunctionType):
                    out.append((f"{name}.{attr}", member))
    return out


def _index(modname: str) -> dict[int, tuple[types.CodeType, tuple[str, tuple[int, ...]]]]:
    index = _indexes.get(modname)
    if index is None:
        index = {}
        module = sys.modules.get(modname)
        if module is not None:
            for qualname, func in _top_level_functions(module):
                stack: list[tuple[types.CodeType, tuple[int, ...]]] = [(func.__code__, ())]
                while stack:
                    code, path = stack.pop()
                    for i, const in enumerate(code.co_consts):
                        if isinstance(const, types.CodeType):
                            index.setdefault(id(const), (const, (qualname, path + (i,))))
                            stack.append((const, path + (i,)))
        _indexes[modname] = index
    return index


def reduce_nested(func: types.FunctionType) -> Optional[tuple]:
    """The pickle reduce tuple of one of Ember's nested functions, or None (cloudpickle's
    way then)."""
    modname = func.__module__
    if not modname or not (modname == "ember" or modname.startswith("ember.")):
        return None
    # the index holds its code objects alive, so an id found there is this very code
    found = _index(modname).get(id(func.__code__))
    if found is None:
        return None
    code = func.__code__
    qualname, path = found[1]
    cells = tuple(_cell_value(c) for c in func.__closure__ or ())
    extra = func.__dict__ or None
    return (_skeleton, (modname, qualname, path, code.co_name, code.co_firstlineno, len(cells)),
            (cells, func.__defaults__, func.__kwdefaults__, func.__qualname__, extra),
            None, None, _set_state)


def _cell_value(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:
        return _EmptyCell


def _skeleton(modname: str, qualname: str, path: tuple[int, ...], name: str, first_line: int,
              ncells: int) -> types.FunctionType:
    """The function around this process's copy of the code, its cells still empty (the
    state fills them after pickle has memoized it, so a closure may refer to itself)."""
    key = (modname, qualname, path)
    code = _resolved.get(key)
    if code is None:
        __import__(modname)
        module = sys.modules[modname]
        holder: Any = module
        for part in qualname.split("."):
            holder = vars(holder)[part]
        code = getattr(holder, "__func__", holder).__code__
        for i in path:
            code = code.co_consts[i]
        if code.co_name != name or code.co_firstlineno != first_line:
            raise ImportError(
                f"{modname}.{qualname}: this process's Ember differs from the driver's "
                f"(expected {name} at line {first_line}, found {code.co_name} at line "
                f"{code.co_firstlineno}); run the same Ember version everywhere")
        _resolved[key] = code
    module = sys.modules[modname]
    closure = tuple(types.CellType() for _ in range(ncells)) or None
    return types.FunctionType(code, vars(module), name, None, closure)


def _set_state(func: types.FunctionType, state: tuple) -> None:
    cells, defaults, kwdefaults, qualname, extra = state
    for cell, value in zip(func.__closure__ or (), cells):
        if value is not _EmptyCell:
            cell.cell_contents = value
    func.__defaults__ = defaults
    func.__kwdefaults__ = kwdefaults
    func.__qualname__ = qualname
    if extra:
        func.__dict__.update(extra)
