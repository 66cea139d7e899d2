"""The part of JSON Schema tool parameters use: an object's properties, their types, required ones, enums,
array lengths and number ranges. What a call's arguments break, in words the policy reads back."""

from __future__ import annotations

from typing import Any, Mapping

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,), "integer": (int,),
    "number": (int, float), "null": (type(None),),
}


def argument_errors(value: Any, schema: Mapping[str, Any], where: str = "arguments") -> list[str]:
    """Each way ``value`` breaks ``schema`` (empty when it fits)."""
    kind = schema.get("type")
    if kind is not None and not _is(value, kind):
        return [f"{where} must be {kind}, got {type(value).__name__}"]
    errors = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where} must be one of {list(schema['enum'])}, got {value!r}")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        errors += [f"{where}.{name} is missing" for name in schema.get("required", ()) if name not in value]
        if schema.get("additionalProperties") is False:
            errors += [f"{where}.{name} is not an argument" for name in value if name not in properties]
        for name, item in value.items():
            if name in properties:
                errors += argument_errors(item, properties[name], f"{where}.{name}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
            errors.append(f"{where} must hold {_length(schema)} items, got {len(value)}")
        if "items" in schema:
            for index, item in enumerate(value):
                errors += argument_errors(item, schema["items"], f"{where}[{index}]")
    if _is(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where} must be >= {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{where} must be <= {schema['maximum']}, got {value}")
    return errors


def _is(value: Any, kind: str) -> bool:
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False  # JSON's true is not a number
    return isinstance(value, _TYPES.get(kind, (object,)))


def _length(schema: Mapping[str, Any]) -> str:
    low, high = schema.get("minItems", 0), schema.get("maxItems")
    return f"{low}" if low == high else f"at least {low}" if high is None else f"{low} to {high}"
