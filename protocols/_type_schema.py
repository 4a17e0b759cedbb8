"""JSON Schema (draft 2020-12) from Python types: attrs classes, pydantic models and the rest.

One generator serves tool parameters and typed response formats, so a class means the
same schema wherever it appears. Classes (attrs or pydantic) become entries of ``$defs``
referenced with ``$ref``; that keeps a class used twice written once and lets a class
refer to itself. pydantic is optional: it is imported only if the caller already did,
so a process without pydantic never loads it.
"""

from __future__ import annotations

import ast
import collections.abc
import enum
import inspect
import itertools
import linecache
import re
import sys
import types
import typing
from typing import (
    Annotated,
    Any,
    Final,
    Generic,
    Literal,
    TypeVar,
    Union,
    final,
    get_args,
    get_origin,
)

import attrs
import cattrs
import orjson

from ._codec import make_converter
from ._errors_llm import UnsupportedTypeError
from ._llm import ResponseFormat
from ._types import JsonObject, JsonValue

__all__ = [
    "SUPPORTED_TYPES",
    "OutputType",
    "SchemaBuilder",
    "configure_models",
    "is_model_class",
    "json_schema_of",
    "json_value_of",
    "parse_docstring",
    "structure_problems",
]

SUPPORTED_TYPES: Final = (
    "str, int, float, bool, None, Any, object, Literal[...], enum.Enum subclasses, attrs classes, "
    "pydantic models, X | None, unions, list[X], Sequence[X], set[X], frozenset[X], "
    "tuple[X, ...], tuple[X, Y], dict[str, X], Mapping[str, X], Annotated[X, 'description']"
)
"""What :func:`json_schema_of` accepts, as error messages list it."""

_SECTION: Final = re.compile(r"^(?P<indent>\s*)(?P<name>[A-Z][A-Za-z ]*):\s*$")
_ARGS_HEADERS: Final = frozenset({"Args", "Arguments", "Parameters", "Attributes"})
_ARG_LINE: Final = re.compile(r"^\*{0,2}(?P<name>\w+)\s*(\([^)]*\))?\s*:\s*(?P<text>.*)$")
_SEQUENCES: Final = frozenset(
    {list, collections.abc.Sequence, collections.abc.MutableSequence, collections.abc.Iterable}
)
_SETS: Final = frozenset({set, frozenset, collections.abc.Set, collections.abc.MutableSet})
_MAPPINGS: Final = frozenset({dict, collections.abc.Mapping, collections.abc.MutableMapping})
_NO_DEFAULT: Final = object()
_DEFAULTS = make_converter()


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into the summary paragraph and parameter descriptions.

    Args:
        doc (str | None): the raw docstring (indentation is cleaned here).

    Returns:
        The first paragraph joined into one line, and a mapping from name to its
        description from the ``Args:`` (or ``Arguments:``/``Parameters:``/``Attributes:``)
        section, continuation lines joined.
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line):
            break
        summary.append(line.strip())
    described: dict[str, str] = {}
    in_args = False
    header_indent = 0
    entry_indent: int | None = None
    current: str | None = None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        section = _SECTION.match(line)
        if section is not None and (not in_args or indent <= header_indent):
            in_args = section["name"] in _ARGS_HEADERS
            header_indent = indent
            entry_indent = None
            current = None
            continue
        if not in_args or not line.strip():
            continue
        if indent <= header_indent:
            in_args = False
            continue
        if entry_indent is None:
            entry_indent = indent
        match = _ARG_LINE.match(line.strip())
        if indent == entry_indent and match is not None:
            current = match["name"]
            described[current] = match["text"].strip()
        elif current is not None:
            described[current] = f"{described[current]} {line.strip()}".strip()
    return " ".join(summary), described


def is_model_class(tp: object) -> bool:
    """Whether ``tp`` is a pydantic v2 model class (never imports pydantic itself)."""
    pydantic = sys.modules.get("pydantic")
    if pydantic is None or not isinstance(tp, type):
        return False
    return issubclass(tp, pydantic.BaseModel)


def configure_models(converter: cattrs.Converter) -> None:
    """Teach a converter pydantic models: ``model_validate`` in, JSON-mode ``model_dump`` out.

    Args:
        converter (cattrs.Converter): the converter to configure in place.
    """
    converter.register_structure_hook_func(
        is_model_class,
        lambda value, tp: tp.model_validate(value),
    )
    converter.register_unstructure_hook_func(
        is_model_class, lambda model: model.model_dump(mode="json")
    )


def json_value_of(value: object) -> object:
    """A default value as JSON, or a private sentinel when it has no JSON form."""
    try:
        plain = _DEFAULTS.unstructure(value)
        return orjson.loads(orjson.dumps(plain))
    except (TypeError, ValueError, orjson.JSONEncodeError):
        return _NO_DEFAULT


def json_schema_of(tp: object, *, label: str | None = None) -> JsonObject:
    """The JSON Schema (draft 2020-12) of values of ``tp``.

    A class (attrs or pydantic) at the root is described inline, so the root is an object
    schema as providers require of a response format; the classes it uses are in
    ``$defs``. Fields without a default are required; ``additionalProperties`` is false
    for attrs classes. A field's description comes from ``attrs.field(metadata=
    {"description": ...})``, the class docstring's ``Attributes:`` section, or the string
    literal under the field (the attribute docstring).

    Args:
        tp (object): the type, e.g. an attrs class, a pydantic model or ``list[int]``.
        label (str | None): how messages name the whole (defaults to the type's name).

    Returns:
        JsonObject: the schema.

    Raises:
        UnsupportedTypeError: a type (of a field, an item...) has no JSON Schema form;
            the message names the field.
    """
    builder = SchemaBuilder(label or _type_name(tp))
    return builder.root(tp, "the type")


def _type_name(tp: object) -> str:
    return getattr(tp, "__qualname__", None) or repr(tp)


def _own_doc(cls: type) -> str:
    """The class's own docstring (not an inherited or generated one)."""
    doc = cls.__dict__.get("__doc__")
    if not isinstance(doc, str) or (attrs.has(cls) and doc.startswith(f"{cls.__name__}(")):
        return ""
    return doc


def _attribute_docs(cls: type) -> dict[str, str]:
    """The string literals written under a class's annotated fields, by field name.

    Each module's source is parsed once (``inspect.getsource`` would search it again for
    every class); a class whose source cannot be found has none.
    """
    module = sys.modules.get(cls.__module__)
    path = getattr(module, "__file__", None)
    if not isinstance(path, str):
        return {}
    table = _MODULE_DOCS.get(path)
    if table is None:
        try:
            tree = ast.parse("".join(linecache.getlines(path)))
        except (SyntaxError, ValueError):
            tree = ast.Module(body=[], type_ignores=[])
        table = _MODULE_DOCS[path] = {}
        _collect_docs(tree.body, "", table)
    return table.get(cls.__qualname__, {})


_MODULE_DOCS: dict[str, dict[str, dict[str, str]]] = {}
"""Per source file: class qualname -> field name -> the string literal under it."""


def _collect_docs(body: list[ast.stmt], prefix: str, table: dict[str, dict[str, str]]) -> None:
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            _collect_docs(node.body, f"{prefix}{node.name}.<locals>.", table)
        elif isinstance(node, ast.ClassDef):
            docs: dict[str, str] = {}
            for field, after in itertools.pairwise(node.body):
                if (
                    isinstance(field, ast.AnnAssign)
                    and isinstance(field.target, ast.Name)
                    and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)
                ):
                    docs[field.target.id] = " ".join(inspect.cleandoc(after.value.value).split())
            if docs:
                table[f"{prefix}{node.name}"] = docs
            _collect_docs(node.body, f"{prefix}{node.name}.", table)


def _described(schema: dict[str, JsonValue], note: str | None) -> dict[str, JsonValue]:
    if note and "description" not in schema:
        return {**schema, "description": note}
    return schema


@final
class SchemaBuilder:
    """Maps Python annotations to JSON Schema, collecting the classes in ``$defs``.

    One builder makes one schema document: :meth:`schema` for each part, then
    :meth:`defs` for the ``$defs`` the parts refer to.
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self._root: type | None = None
        self._names: dict[type, str] = {}
        self._defs: dict[str, JsonValue] = {}

    def fail(self, where: str, message: str) -> UnsupportedTypeError:
        return UnsupportedTypeError(f"{self.label}: {where}: {message}")

    def defs(self) -> dict[str, JsonValue]:
        """The classes referred to so far, by their ``$defs`` name."""
        return dict(self._defs)

    def root(self, tp: object, where: str) -> JsonObject:
        """A whole document: a class inline at the root, with ``$defs`` for the rest."""
        if is_model_class(tp):
            body = self._model(typing.cast(type, tp), where)
            ref = body.get("$ref")
            if isinstance(ref, str) and len(body) == 1:  # a model that refers to itself
                target = self._defs[ref.rpartition("/")[2]]
                body = dict(typing.cast(dict[str, JsonValue], target))
        elif isinstance(tp, type) and attrs.has(tp):
            self._root = tp
            body = self._class(tp, where)
        else:
            body = self.schema(tp, where)
        if self._defs:
            body = {**body, "$defs": self.defs()}
        return body

    def schema(self, tp: object, where: str) -> dict[str, JsonValue]:
        """The schema of one annotation; ``where`` names it in error messages."""
        origin = get_origin(tp)
        args = get_args(tp)
        if origin is Annotated:
            inner = self.schema(args[0], where)
            notes = [a for a in args[1:] if isinstance(a, str)]
            return {**inner, "description": " ".join(notes)} if notes else inner
        if tp is Any or tp is object:
            return {}
        if tp is None or tp is type(None):
            return {"type": "null"}
        scalar = {bool: "boolean", int: "integer", float: "number", str: "string"}.get(
            tp if isinstance(tp, type) else type(None)
        )
        if scalar is not None:
            return {"type": scalar}
        if origin is Literal:
            return self._literal(args, where)
        if origin is Union or origin is types.UnionType:
            return self._union(args, where)
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return self._enum(tp, where)
        if isinstance(tp, type) and (attrs.has(tp) or is_model_class(tp)):
            return self._ref(tp, where)
        container = origin if origin is not None else tp
        if container in _SEQUENCES or container in _SETS:
            items = self.schema(args[0], f"{where} items") if args else {}
            out: dict[str, JsonValue] = {"type": "array", "items": items}
            if container in _SETS:
                out["uniqueItems"] = True
            return out
        if container is tuple:
            return self._tuple(args, where)
        if container in _MAPPINGS:
            if args and args[0] is not str:
                raise self.fail(
                    where, f"mapping keys must be str (JSON object keys), got {_type_name(args[0])}"
                )
            values = self.schema(args[1], f"{where} values") if args else {}
            return {"type": "object", "additionalProperties": values}
        raise self.fail(where, f"unsupported type {_type_name(tp)}; supported: {SUPPORTED_TYPES}")

    def _literal(self, values: tuple[object, ...], where: str) -> dict[str, JsonValue]:
        kinds: list[JsonValue] = []
        for value in values:
            kind = {bool: "boolean", int: "integer", str: "string", type(None): "null"}.get(
                type(value)
            )
            if kind is None:
                raise self.fail(
                    where, f"Literal values must be str, int, bool or None, got {value!r}"
                )
            if kind not in kinds:
                kinds.append(kind)
        enum_values: list[JsonValue] = [typing.cast(JsonValue, v) for v in values]
        return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": enum_values}

    def _union(self, members: tuple[object, ...], where: str) -> dict[str, JsonValue]:
        schemas = [self.schema(m, where) for m in members if m is not type(None)]
        nullable = type(None) in members
        if nullable and len(schemas) == 1:
            only = schemas[0]
            kind = only.get("type")
            if isinstance(kind, str) and "enum" not in only:
                return {**only, "type": [kind, "null"]}
            if isinstance(kind, str) and isinstance(only.get("enum"), list):
                enum_values = typing.cast(list[JsonValue], only["enum"])
                return {**only, "type": [kind, "null"], "enum": [*enum_values, None]}
        options: list[JsonValue] = list(schemas)
        if nullable:
            options.append({"type": "null"})
        return {"anyOf": options}

    def _enum(self, cls: type[enum.Enum], where: str) -> dict[str, JsonValue]:
        values: list[JsonValue] = []
        for member in cls:
            if not isinstance(member.value, str | int) or isinstance(member.value, bool):
                raise self.fail(
                    where,
                    f"enum {cls.__qualname__} has a member {member.name} whose value "
                    f"{member.value!r} is not a str or an int",
                )
            values.append(member.value)
        kinds = {type(v) for v in values}
        out: dict[str, JsonValue] = {"enum": values}
        if kinds == {str}:
            out["type"] = "string"
        elif kinds == {int}:
            out["type"] = "integer"
        return _described(out, parse_docstring(_own_doc(cls))[0])

    def _tuple(self, args: tuple[object, ...], where: str) -> dict[str, JsonValue]:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": self.schema(args[0], f"{where} items")}
        if not args:
            return {"type": "array"}
        if args == ((),):  # tuple[()]
            return {"type": "array", "maxItems": 0}
        prefix: list[JsonValue] = [self.schema(a, f"{where} item {i}") for i, a in enumerate(args)]
        return {
            "type": "array",
            "prefixItems": prefix,
            "items": False,
            "minItems": len(args),
            "maxItems": len(args),
        }

    def _ref(self, cls: type, where: str) -> dict[str, JsonValue]:
        if cls is self._root:
            return {"$ref": "#"}
        if is_model_class(cls):
            body = self._model(cls, where)
            if "$ref" in body and len(body) == 1:
                return body
            self._define(cls.__name__, body, where)
            return {"$ref": f"#/$defs/{cls.__name__}"}
        name = self._names.get(cls)
        if name is None:
            name = cls.__name__
            if name in self._defs or name in self._names.values():
                name = f"{cls.__module__}.{cls.__qualname__}"
            self._names[cls] = name
            self._defs[name] = {}  # reserved: a class that refers to itself finds its name
            self._defs[name] = self._class(cls, where)
        return {"$ref": f"#/$defs/{name}"}

    def _define(self, name: str, body: JsonValue, where: str) -> None:
        if name in self._defs and self._defs[name] != body:
            raise self.fail(
                where, f"two classes are named {name!r} in one schema; rename one of them"
            )
        self._defs[name] = body

    def _class(self, cls: type, where: str) -> dict[str, JsonValue]:
        try:
            attrs.resolve_types(cls)
        except Exception as exc:
            raise self.fail(
                where, f"cannot resolve the field types of {cls.__qualname__}: {exc}"
            ) from exc
        summary, documented = parse_docstring(_own_doc(cls))
        under = _attribute_docs(cls)
        properties: dict[str, JsonValue] = {}
        required: list[JsonValue] = []
        for field in attrs.fields(cls):
            if not field.init:
                continue
            at = f"field {cls.__qualname__}.{field.name}"
            if field.type is None:
                raise self.fail(at, "no type annotation")
            schema = self.schema(field.type, at)
            note = field.metadata.get("description")
            schema = _described(schema, note if isinstance(note, str) else None)
            schema = _described(schema, documented.get(field.name) or under.get(field.name))
            if field.default is attrs.NOTHING:
                required.append(field.alias or field.name)
            elif not isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]  # attrs.Factory is a class at runtime
                default = json_value_of(field.default)
                if default is not _NO_DEFAULT:
                    schema = {**schema, "default": typing.cast(JsonValue, default)}
            properties[field.alias or field.name] = schema
        out: dict[str, JsonValue] = {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }
        return _described(out, summary)

    def _model(self, cls: type, where: str) -> dict[str, JsonValue]:
        """A pydantic model's own schema, its ``$defs`` merged into ours."""
        model = typing.cast(Any, cls)
        try:
            schema = model.model_json_schema(ref_template="#/$defs/{model}")
        except Exception as exc:  # pydantic's PydanticInvalidForJsonSchema and the like
            raise self.fail(
                where, f"pydantic cannot describe {cls.__qualname__}: {type(exc).__name__}: {exc}"
            ) from exc
        schema = dict(schema)
        nested = schema.pop("$defs", {})
        for name, body in nested.items():
            self._define(name, body, where)
        return schema


_STRUCTURE = make_converter()
configure_models(_STRUCTURE)

T = TypeVar("T")


@final
@attrs.frozen
class OutputType(Generic[T]):
    """A class a structured answer becomes, with the response format made from it.

    The model is asked for ``format`` (its schema is recorded like any response format);
    the JSON answer is checked against it and recorded; :meth:`structure` turns the JSON
    into an instance when a result is read, so a replay or a restart that reads the same
    JSON gets an equal instance.
    """

    cls: type[T]
    """The attrs class or pydantic model."""
    format: ResponseFormat
    """The response format sent to the model: the class's name and JSON Schema."""

    @classmethod
    def of(cls, tp: type[T], *, strict: bool = True) -> OutputType[T]:
        """The output type of an attrs class or a pydantic model.

        Raises:
            UnsupportedTypeError: ``tp`` is not an attrs class or a pydantic model, or one
                of its fields has no JSON Schema form.
        """
        if not (isinstance(tp, type) and (attrs.has(tp) or is_model_class(tp))):
            raise UnsupportedTypeError(
                f"response_format: {_type_name(tp)} is not an attrs class or a pydantic "
                "model; give one of those, or a ResponseFormat with a JSON Schema"
            )
        schema = json_schema_of(tp, label=f"response_format {tp.__qualname__}")
        name = re.sub(r"[^A-Za-z0-9_-]", "_", tp.__qualname__)[:64]
        return cls(tp, ResponseFormat(name=name, schema=schema, strict=strict))

    def structure(self, value: JsonValue) -> T:
        """The instance of ``cls`` that the JSON ``value`` describes.

        Raises:
            ValueError: ``value`` does not fit the class; the message lists
                ``$.path: problem`` lines.
        """
        try:
            return _STRUCTURE.structure(value, self.cls)
        except Exception as exc:
            raise ValueError("; ".join(structure_problems(exc, "$"))) from exc


def structure_problems(exc: Exception, path: str) -> list[str]:
    """Turn a cattrs (or pydantic) failure into ``"$.path: what is wrong"`` lines."""
    found = cattrs.transform_error(
        exc, path=path, format_exception=lambda e, _type: f"{type(e).__name__}: {e}"
    )
    lines: list[str] = []
    for line in found:
        message, _, where = line.rpartition(" @ ")
        lines.append(f"{where}: {message}" if message else line)
    return lines
