"""The message codec: registered frozen dataclasses and enums <-> msgpack bytes.

Why msgpack and not pickle: a control message may arrive from any peer that can open a TCP
connection, and decoding it must never run code. msgpack is a data-only format, so the worst
a malformed or hostile payload can do here is raise `MessageDecodeError`. Executable payloads
(tasks, results, blocks) travel inside messages as opaque `bytes` fields; whoever unpickles
them does so only after the connection has authenticated (see `ember.rpc.tcp`).

Encoding (a value -> msgpack-native structure, then `msgpack.packb`):

=====================================  ==============================================
Python value                           msgpack value
=====================================  ==============================================
None, bool, int, float, str            the same
bytes / bytearray / memoryview         bin (opaque)
list, tuple, set, frozenset            array (the annotation restores tuple/set)
dict with str/int keys                 map
@message dataclass instance            map ``{"__m__": "ClassName", field: value...}``
@message Enum member                   map ``{"__enum__": ["ClassName", "MEMBER"]}``
RpcEndpointRef                         map ``{"__ref__": [host, port, name]}``
RpcAddress                             map ``{"__addr__": [host, port]}``
=====================================  ==============================================

Decoding checks every dataclass field against its annotation (int, float, str, bytes, bool,
list/tuple/set[...], dict[...], Optional/Union, Literal, registered dataclasses and enums,
RpcAddress, RpcEndpointRef; ``Any`` and unknown generics accept anything), because the
receiving state machine trusts its message types: a `str` where an `int` is expected must be
refused at the edge, not discovered three calls deep in the master. An int is accepted (and
converted) where a float is annotated. Missing fields without a default, unknown fields and
unknown type names are errors; a missing field that has a default takes the default, so a
peer one field behind still talks (the only deviation from "every field must be present").

Known limit: a plain ``dict`` whose keys are exactly one of the tags above is read as the
tagged value; messages should not carry user dicts keyed "__m__"/"__ref__"/....
"""
from __future__ import annotations

import dataclasses
import enum
import sys
import threading
import types
import typing
from typing import Any, Callable

import msgpack

__all__ = ["message", "encode", "decode", "MessageDecodeError", "registered"]

_TAG_MSG = "__m__"
_TAG_REF = "__ref__"
_TAG_ADDR = "__addr__"
_TAG_ENUM = "__enum__"


class MessageDecodeError(ValueError):
    """A payload is not a well-formed message: bad msgpack, unknown type, bad fields."""


# name -> registered class (dataclass or Enum)
_REGISTRY: dict[str, type] = {}
# dataclass -> tuple of (encoded) field names, for the encoder's hot path
_ENCODE_FIELDS: dict[type, tuple[str, ...]] = {}
# dataclass -> _ClassSpec (built lazily: annotations may name classes defined later)
_DECODE_SPECS: dict[type, "_ClassSpec"] = {}

# Set by ember.rpc.endpoint at import time (it imports this module, not the other way round).
_ADDRESS_CLS: type | None = None
_REF_CLS: type | None = None


def _bind_core_types(address_cls: type, ref_cls: type) -> None:
    """Called once by ember.rpc.endpoint so the codec knows RpcAddress and RpcEndpointRef."""
    global _ADDRESS_CLS, _REF_CLS
    _ADDRESS_CLS, _REF_CLS = address_cls, ref_cls


def message(cls: type) -> type:
    """Register a ``@dataclass(frozen=True)`` or an ``Enum`` for encoding, by class name.

    The class name is the wire name, so it must be unique across the process; registering a
    different class under a taken name raises ValueError (silently replacing it would make
    the receiver build the wrong type). Re-registering the same module.qualname (a reload,
    or a class defined inside a function that runs twice) replaces the old entry.
    """
    if not isinstance(cls, type):
        raise TypeError(f"@message decorates a class, got {cls!r}")
    is_enum = issubclass(cls, enum.Enum)
    if not is_enum and not dataclasses.is_dataclass(cls):
        raise TypeError(
            f"@message class {cls.__qualname__} must be a @dataclass(frozen=True) or an Enum; "
            "put @message above @dataclass")
    name = cls.__name__
    old = _REGISTRY.get(name)
    if old is not None and old is not cls and (
            old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__):
        raise ValueError(
            f"Message name {name!r} is already registered by {old.__module__}.{old.__qualname__};"
            f" rename {cls.__module__}.{cls.__qualname__} (names are the wire identity)")
    if old is not None:
        _ENCODE_FIELDS.pop(old, None)
        _DECODE_SPECS.pop(old, None)
    _REGISTRY[name] = cls
    if not is_enum:
        _ENCODE_FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls) if f.init)
    return cls


def registered(name: str) -> type | None:
    """The class registered under `name`, or None (for diagnostics and tests)."""
    return _REGISTRY.get(name)


# ------------------------------------------------------------------------------------------
# Encoding
# ------------------------------------------------------------------------------------------

def _default(obj: Any) -> Any:
    """msgpack's hook for every value it cannot pack natively (strict_types=True)."""
    cls = type(obj)
    names = _ENCODE_FIELDS.get(cls)
    if names is not None:
        d: dict[str, Any] = {_TAG_MSG: cls.__name__}
        for n in names:
            d[n] = getattr(obj, n)
        return d
    if cls is tuple or cls is set or cls is frozenset:
        return list(obj)
    if _REF_CLS is not None and isinstance(obj, _REF_CLS):
        a = obj.address
        return {_TAG_REF: [a.host, a.port, obj.name]}
    if cls is _ADDRESS_CLS:
        return {_TAG_ADDR: [obj.host, obj.port]}
    if isinstance(obj, enum.Enum):
        if _REGISTRY.get(cls.__name__) is not cls:
            raise TypeError(f"Cannot encode enum {cls.__qualname__}: register it with @message")
        return {_TAG_ENUM: [cls.__name__, obj.name]}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        raise TypeError(
            f"Cannot encode {cls.__qualname__}: register the dataclass with @message")
    # Subclasses of the basic types (strict_types makes msgpack refuse them): keep the value.
    if isinstance(obj, (bytearray, memoryview)):
        return bytes(obj)
    for base in (bool, int, float, str, bytes, list, tuple, dict):
        if isinstance(obj, base):
            return base(obj)
    raise TypeError(
        f"Cannot encode a value of type {cls.__module__}.{cls.__qualname__} in an RPC message; "
        "messages hold None/bool/int/float/str/bytes, lists, tuples, dicts, @message "
        "dataclasses and enums, RpcAddress and RpcEndpointRef")


_packers = threading.local()  # a Packer per thread: building one per message doubles the cost


def encode(obj: Any) -> bytes:
    """Encode a message (or any supported value) to msgpack bytes. Never pickles.

    Raises TypeError for a value that has no data-only encoding (unregistered classes,
    functions, ...), which is a programming error at the sender.
    """
    try:
        packer = _packers.packer
    except AttributeError:
        packer = _packers.packer = msgpack.Packer(default=_default, strict_types=True,
                                                  use_bin_type=True, autoreset=True)
    return packer.pack(obj)


# ------------------------------------------------------------------------------------------
# Decoding and field type checks
# ------------------------------------------------------------------------------------------

class _Mismatch(Exception):
    """Internal: a value does not fit an annotation (turned into MessageDecodeError)."""


Checker = Callable[[Any], Any]  # returns the (possibly converted) value or raises _Mismatch


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return repr(tp).replace("typing.", "")


def _show(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def _fail(tp: Any, v: Any) -> typing.NoReturn:
    raise _Mismatch(f"expected {_type_name(tp)}, got {type(v).__name__} {_show(v)}")


def _compile(tp: Any) -> Checker | None:
    """Build a checker for annotation `tp`; None means "anything goes" (Any, unknown)."""
    if tp is Any or tp is object or isinstance(tp, (typing.TypeVar, str, typing.ForwardRef)):
        return None
    if tp is None or tp is type(None):
        def check_none(v: Any) -> Any:
            if v is not None:
                _fail(None, v)
            return v
        return check_none
    supertype = getattr(tp, "__supertype__", None)  # typing.NewType
    if supertype is not None:
        return _compile(supertype)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return _compile(args[0])
    if origin is typing.Union or (origin is types.UnionType):
        return _compile_union(tp, args)
    if origin is typing.Literal:
        allowed = args

        def check_literal(v: Any) -> Any:
            if v not in allowed or type(v) not in {type(a) for a in allowed}:
                _fail(tp, v)
            return v
        return check_literal
    if origin is not None:
        return _compile_generic(tp, origin, args)
    if tp is bool:
        def check_bool(v: Any) -> Any:
            if type(v) is not bool:
                _fail(bool, v)
            return v
        return check_bool
    if tp is int:
        def check_int(v: Any) -> Any:
            if type(v) is not int:
                _fail(int, v)
            return v
        return check_int
    if tp is float:
        def check_float(v: Any) -> Any:
            t = type(v)
            if t is float:
                return v
            if t is int:
                return float(v)
            _fail(float, v)
        return check_float
    if tp is str:
        def check_str(v: Any) -> Any:
            if type(v) is not str:
                _fail(str, v)
            return v
        return check_str
    if tp is bytes or tp is bytearray:
        def check_bytes(v: Any) -> Any:
            if type(v) is not bytes:
                _fail(bytes, v)
            return v if tp is bytes else bytearray(v)
        return check_bytes
    if tp in (list, tuple, set, frozenset, dict):
        return _compile_generic(tp, tp, ())
    if isinstance(tp, type):
        def check_instance(v: Any) -> Any:
            if not isinstance(v, tp):
                _fail(tp, v)
            return v
        return check_instance
    return None  # Callable, Protocol and other exotica: not checkable as data


def _compile_union(tp: Any, args: tuple) -> Checker | None:
    non_none = [a for a in args if a is not type(None)]
    optional = len(non_none) < len(args)
    checkers = [_compile(a) for a in non_none]
    if any(c is None for c in checkers):
        return None
    if optional and len(checkers) == 1:
        inner = checkers[0]

        def check_optional(v: Any) -> Any:
            return None if v is None else inner(v)
        return check_optional

    def check_union(v: Any) -> Any:
        if v is None and optional:
            return None
        for c in checkers:
            try:
                return c(v)
            except _Mismatch:
                pass
        _fail(tp, v)
    return check_union


_SEQ_ORIGINS = {list, tuple, set, frozenset}
_ABC_SEQ = {typing.Sequence, typing.List, typing.Iterable, typing.Collection,
            typing.MutableSequence}
_ABC_MAP = {typing.Mapping, typing.MutableMapping, typing.Dict}


def _compile_generic(tp: Any, origin: Any, args: tuple) -> Checker | None:
    import collections.abc as cabc
    if origin in (cabc.Sequence, cabc.MutableSequence, cabc.Iterable, cabc.Collection) \
            or origin in _ABC_SEQ:
        origin = list
    if origin in (cabc.Mapping, cabc.MutableMapping) or origin in _ABC_MAP:
        origin = dict
    if origin in (cabc.Set, cabc.MutableSet):
        origin = set
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            elem = _compile(args[0])

            def check_var_tuple(v: Any) -> Any:
                if type(v) is not list and type(v) is not tuple:
                    _fail(tp, v)
                return tuple(v) if elem is None else tuple(_at(elem, x, i) for i, x in enumerate(v))
            return check_var_tuple
        if args == ((),):  # tuple[()]
            args = ()
        items = [_compile(a) for a in args]
        fixed = bool(args)

        def check_tuple(v: Any) -> Any:
            if type(v) is not list and type(v) is not tuple:
                _fail(tp, v)
            if not fixed:
                return tuple(v)
            if len(v) != len(items):
                raise _Mismatch(f"expected {_type_name(tp)} ({len(items)} items), "
                                f"got {len(v)} items")
            return tuple(x if c is None else _at(c, x, i) for i, (c, x) in
                         enumerate(zip(items, v)))
        return check_tuple
    if origin in (list, set, frozenset):
        elem = _compile(args[0]) if args else None
        build = origin
        # items whose checker returns them as they are exactly when they are of this type:
        # checked in one loop, without two calls per item (a StatusUpdates of a busy
        # executor carries three lists of dozens)
        exact = args[0] if args and args[0] in (int, str, bool, bytes) else None

        def check_seq(v: Any) -> Any:
            if type(v) is not list and type(v) is not tuple:
                _fail(tp, v)
            if elem is None:
                return v if build is list and type(v) is list else build(v)
            if exact is not None:
                for x in v:
                    if type(x) is not exact:
                        break       # the checker says which item, and how
                else:
                    return v if build is list and type(v) is list else build(v)
            out = [_at(elem, x, i) for i, x in enumerate(v)]
            return out if build is list else build(out)
        return check_seq
    if origin is dict:
        kc = _compile(args[0]) if args else None
        vc = _compile(args[1]) if len(args) > 1 else None

        def check_dict(v: Any) -> Any:
            if type(v) is not dict:
                _fail(tp, v)
            if kc is None and vc is None:
                return v
            out = {}
            for k, x in v.items():
                k2 = k if kc is None else _at(kc, k, f"key {_show(k)}")
                out[k2] = x if vc is None else _at(vc, x, _show(k))
            return out
        return check_dict
    if origin is type or origin is typing.Callable or not isinstance(origin, type):
        return None
    return _compile(origin)


def _at(check: Checker, v: Any, where: Any) -> Any:
    """Run a nested checker, prefixing the position to any mismatch message."""
    try:
        return check(v)
    except _Mismatch as e:
        raise _Mismatch(f"[{where}]: {e}") from None


class _ClassSpec:
    """How to rebuild and check one registered dataclass."""

    __slots__ = ("cls", "checkers", "required", "names")

    def __init__(self, cls: type) -> None:
        self.cls = cls
        hints = _field_hints(cls)
        self.checkers: dict[str, Checker | None] = {}
        self.required: set[str] = set()
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            self.checkers[f.name] = _compile(hints.get(f.name, Any))
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                self.required.add(f.name)
        self.names = frozenset(self.checkers)

    def build(self, d: dict) -> Any:
        del d[_TAG_MSG]
        checkers = self.checkers
        for k, v in d.items():
            check = checkers.get(k, _NO_FIELD)
            if check is None:
                continue
            if check is _NO_FIELD:
                raise MessageDecodeError(f"{self.cls.__name__} has no field {_show(k)}")
            try:
                d[k] = check(v)   # same keys: updating values while iterating is safe
            except _Mismatch as e:
                raise MessageDecodeError(f"Field {self.cls.__name__}.{k}: {e}") from None
        if not d.keys() >= self.required:
            missing = self.required.difference(d)
            raise MessageDecodeError(
                f"{self.cls.__name__} is missing field(s) {', '.join(sorted(missing))}")
        try:
            return self.cls(**d)
        except Exception as e:  # __post_init__ validation of the message class itself
            raise MessageDecodeError(
                f"Cannot build {self.cls.__name__}: {type(e).__name__}: {e}") from None


_NO_FIELD = object()


def _field_hints(cls: type) -> dict[str, Any]:
    """Resolved annotations; a field whose annotation cannot be resolved is left unchecked."""
    try:
        return typing.get_type_hints(cls)
    except Exception:
        pass
    module_ns = vars(sys.modules[cls.__module__]) if cls.__module__ in sys.modules else {}
    hints: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        ann = f.type
        if isinstance(ann, str):
            try:
                ann = eval(ann, dict(module_ns), {})  # an annotation string, from our own code
            except Exception:
                ann = Any
        hints[f.name] = ann
    return hints


def _spec(cls: type) -> _ClassSpec:
    spec = _DECODE_SPECS.get(cls)
    if spec is None:
        spec = _DECODE_SPECS[cls] = _ClassSpec(cls)
    return spec


RefFactory = Callable[[str, int, str], Any]


def _make_hook(ref_factory: RefFactory) -> Callable[[dict], Any]:
    def hook(d: dict) -> Any:
        tag = d.get(_TAG_MSG)
        if tag is not None:
            cls = _REGISTRY.get(tag) if type(tag) is str else None
            if cls is None or cls not in _ENCODE_FIELDS:
                raise MessageDecodeError(f"Unknown message type {_show(tag)}")
            return _spec(cls).build(d)
        if len(d) != 1:
            return d
        if _TAG_REF in d:
            v = d[_TAG_REF]
            if not (type(v) is list and len(v) == 3 and type(v[0]) is str
                    and type(v[1]) is int and type(v[2]) is str):
                raise MessageDecodeError(f"Malformed endpoint ref {_show(v)}")
            return ref_factory(v[0], v[1], v[2])
        if _TAG_ADDR in d:
            v = d[_TAG_ADDR]
            if not (type(v) is list and len(v) == 2 and type(v[0]) is str
                    and type(v[1]) is int):
                raise MessageDecodeError(f"Malformed address {_show(v)}")
            assert _ADDRESS_CLS is not None
            return _ADDRESS_CLS(v[0], v[1])
        if _TAG_ENUM in d:
            v = d[_TAG_ENUM]
            if not (type(v) is list and len(v) == 2 and type(v[0]) is str
                    and type(v[1]) is str):
                raise MessageDecodeError(f"Malformed enum value {_show(v)}")
            cls = _REGISTRY.get(v[0])
            if cls is None or not issubclass(cls, enum.Enum):
                raise MessageDecodeError(f"Unknown enum type {_show(v[0])}")
            try:
                return cls[v[1]]
            except KeyError:
                raise MessageDecodeError(f"{v[0]} has no member {_show(v[1])}") from None
        return d
    return hook


def _refuse_ext(code: int, data: bytes) -> Any:
    raise MessageDecodeError(f"Unsupported msgpack extension type {code}")


def _unbound_ref_factory(env: Any) -> RefFactory:
    def make(host: str, port: int, name: str) -> Any:
        assert _ADDRESS_CLS is not None and _REF_CLS is not None
        if env is not None:
            return env._ref_from_wire(host, port, name, None)
        return _REF_CLS(_ADDRESS_CLS(host, port), name, None)
    return make


def _decode_with(data: bytes | memoryview, hook: Callable[[dict], Any]) -> Any:
    """Decode with a prepared object hook (the transport caches one per connection)."""
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False, object_hook=hook,
                               ext_hook=_refuse_ext, use_list=True)
    except MessageDecodeError:
        raise
    except Exception as e:  # msgpack's own errors: ExtraData, FormatError, StackError, ...
        raise MessageDecodeError(f"Malformed message: {type(e).__name__}: {e}") from None


def decode(data: bytes | memoryview, env: Any = None) -> Any:
    """Decode bytes produced by `encode`. Never unpickles.

    `env` (an RpcEnv) binds decoded RpcEndpointRefs to the receiving env so they can send;
    without it refs come back unbound (usable as identities, not for sending).
    Raises MessageDecodeError for malformed msgpack, unknown type names, missing or extra
    fields, or field values of the wrong type.
    """
    return _decode_with(data, _make_hook(_unbound_ref_factory(env)))
