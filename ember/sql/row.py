"""``Row``: the named-tuple record type PySpark users build RDDs of.

PySpark programs that never touch DataFrames still use ``pyspark.sql.Row`` as
a lightweight record (``rdd.map(lambda x: Row(key=x, n=1))``).  This module
re-implements its RDD-level behaviour: a ``tuple`` subclass whose fields are
reachable by position, by name (``r["name"]``) and as attributes (``r.name``);
``Row("name", "age")`` makes a reusable row "class"; rows compare and hash as
plain tuples, are read-only, and pickle by value so they cross process
boundaries with the standard ``pickle`` module.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple, Union

__all__ = ["Row"]


class Row(tuple):
    """A row of data: ``Row(name="Alice", age=11)`` or ``Row("name", "age")("Alice", 11)``.

    Keyword arguments keep their order (PySpark >= 3.0).  Positional arguments
    create a row without field names, which doubles as a row factory: calling
    it with values returns a named row.  Equality and hashing are those of the
    underlying tuple, so field names are ignored when comparing.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> "Row":
        if args and kwargs:
            raise ValueError("Can not use both args and kwargs to create Row")
        if kwargs:
            row = tuple.__new__(cls, list(kwargs.values()))
            row.__fields__ = list(kwargs.keys())
            return row
        return tuple.__new__(cls, args)

    def asDict(self, recursive: bool = False) -> Dict[str, Any]:
        """The row as a ``{field: value}`` dict; ``recursive=True`` also converts
        nested Rows, including those inside lists and dict values."""
        try:
            fields = self.__dict__["__fields__"]
        except KeyError:
            raise TypeError("Cannot convert a Row class into dict") from None
        if not recursive:
            return dict(zip(fields, self))
        return dict(zip(fields, (_to_plain(v) for v in self)))

    def __contains__(self, item: Any) -> bool:
        fields = self.__dict__.get("__fields__")
        if fields is not None:
            return item in fields
        return tuple.__contains__(self, item)

    def __call__(self, *args: Any) -> "Row":
        """Use a field-name row as a factory: ``Person("Alice", 11)``."""
        if len(args) > len(self):
            raise ValueError(
                "Can not create Row with fields %s, expected %d values but got %s"
                % (self, len(self), args)
            )
        return _create_row(self, args)

    def __getitem__(self, item: Any) -> Any:
        if isinstance(item, (int, slice)):
            return tuple.__getitem__(self, item)
        fields = self.__dict__.get("__fields__")
        if fields is None:
            raise KeyError(item)
        try:
            idx = fields.index(item)
        except ValueError:
            raise ValueError(item) from None
        try:
            return tuple.__getitem__(self, idx)
        except IndexError:  # factory-built row with fewer values than fields
            raise KeyError(item) from None

    def __getattr__(self, item: str) -> Any:
        # Only called when normal lookup fails, i.e. for field names.
        if item.startswith("__"):
            raise AttributeError(item)
        fields = self.__dict__.get("__fields__")
        if fields is None:
            raise AttributeError(item)
        try:
            return tuple.__getitem__(self, fields.index(item))
        except (ValueError, IndexError):
            raise AttributeError(item) from None

    def __setattr__(self, key: str, value: Any) -> None:
        if key != "__fields__":
            raise RuntimeError("Row is read-only")
        self.__dict__[key] = value

    def __delattr__(self, key: str) -> None:
        raise RuntimeError("Row is read-only")

    def __reduce__(self) -> Tuple[Any, ...]:
        fields = self.__dict__.get("__fields__")
        if fields is not None:
            return (_create_row, (fields, tuple(self)))
        return (Row, tuple(self))

    def __repr__(self) -> str:
        fields = self.__dict__.get("__fields__")
        if fields is not None:
            return "Row(%s)" % ", ".join("%s=%r" % (k, v) for k, v in zip(fields, tuple(self)))
        return "<Row(%s)>" % ", ".join("%r" % v for v in self)


def _to_plain(obj: Any) -> Any:
    if isinstance(obj, Row):
        return obj.asDict(True)
    if isinstance(obj, list):
        return [_to_plain(o) for o in obj]
    if isinstance(obj, dict):
        return {k: _to_plain(v) for k, v in obj.items()}
    return obj


def _create_row(fields: Union[Row, List[str], Sequence[str]], values: Sequence[Any]) -> Row:
    """Build a named row; also the unpickling hook referenced by ``Row.__reduce__``."""
    row = Row(*values)
    row.__fields__ = fields
    return row
