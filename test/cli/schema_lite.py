# SPDX-License-Identifier: MIT
"""A small JSON Schema (draft 2020-12) validator: just the keywords docs/linkd-result.schema.json
uses, standard library only (python3-jsonschema is not a dependency). A keyword it does not know
is an error, so the schema can never rely on a check that silently does nothing."""

import re

ANNOTATIONS = {"$schema", "$id", "$defs", "title", "description", "$comment"}
KNOWN = ANNOTATIONS | {"type", "properties", "required", "additionalProperties", "items", "enum",
                       "const", "pattern", "minimum", "maximum", "exclusiveMinimum", "minLength",
                       "minItems", "maxItems", "oneOf", "anyOf", "$ref"}


def _type_ok(value, name):
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "array":
        return isinstance(value, list)
    if name == "object":
        return isinstance(value, dict)
    raise ValueError("unknown type %r in schema" % name)


def _same(a, b):
    """JSON equality: true is not 1, 1 is 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _resolve(root, ref):
    if not ref.startswith("#/"):
        raise ValueError("only local $ref supported: %r" % ref)
    node = root
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def validate(value, schema, root=None, path="$"):
    """Returns a list of error strings (empty when `value` is valid)."""
    root = schema if root is None else root
    errors = []
    unknown = set(schema) - KNOWN
    if unknown:
        raise ValueError("%s: schema uses unsupported keywords %s" % (path, sorted(unknown)))
    if "$ref" in schema:
        errors += validate(value, _resolve(root, schema["$ref"]), root, path)
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_type_ok(value, t) for t in types):
            return errors + ["%s: %r is not of type %s" % (path, value, "/".join(types))]
    if "enum" in schema and not any(_same(value, e) for e in schema["enum"]):
        errors.append("%s: %r is not one of %r" % (path, value, schema["enum"]))
    if "const" in schema and not _same(value, schema["const"]):
        errors.append("%s: %r is not %r" % (path, value, schema["const"]))
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append("%s: %r does not match %r" % (path, value, schema["pattern"]))
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append("%s: %r is shorter than %d" % (path, value, schema["minLength"]))
    if _type_ok(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append("%s: %r < minimum %r" % (path, value, schema["minimum"]))
        if "maximum" in schema and value > schema["maximum"]:
            errors.append("%s: %r > maximum %r" % (path, value, schema["maximum"]))
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            errors.append("%s: %r <= %r" % (path, value, schema["exclusiveMinimum"]))
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append("%s: fewer than %d items" % (path, schema["minItems"]))
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append("%s: more than %d items" % (path, schema["maxItems"]))
        if "items" in schema:
            for i, item in enumerate(value):
                errors += validate(item, schema["items"], root, "%s[%d]" % (path, i))
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                errors.append("%s: missing required property %r" % (path, name))
        for name, item in value.items():
            if name in props:
                errors += validate(item, props[name], root, "%s.%s" % (path, name))
            elif schema.get("additionalProperties") is False:
                errors.append("%s: unexpected property %r" % (path, name))
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += validate(item, schema["additionalProperties"], root,
                                   "%s.%s" % (path, name))
    for key in ("oneOf", "anyOf"):
        if key in schema:
            passing = [s for s in schema[key] if not validate(value, s, root, path)]
            if key == "oneOf" and len(passing) != 1:
                errors.append("%s: %d of the oneOf alternatives match (want 1)" %
                              (path, len(passing)))
            if key == "anyOf" and not passing:
                errors.append("%s: no anyOf alternative matches" % path)
    return errors
