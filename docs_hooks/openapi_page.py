"""The REST API reference (docs/reference/rest-api.md), from the OpenAPI schema drf-spectacular builds
of the real views (the schema `/api/schema/` serves and Swagger at `/api/docs/` draws): each path and
method with its description, parameters, request body and responses, then every schema they name."""

from __future__ import annotations

import re
from typing import Any

from docs_hooks._django import setup

METHODS = ("get", "post", "put", "patch", "delete")


def schema() -> dict[str, Any]:
    setup()
    from drf_spectacular.generators import SchemaGenerator

    return SchemaGenerator().get_schema(request=None, public=True)


def operation_anchor(method: str, path: str) -> str:
    return f"{method}-" + re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-")


def cell(text: str | None) -> str:
    """Text for a table cell: one line, pipes escaped."""
    return re.sub(r"\s+", " ", text or "").replace("|", r"\|").strip()


def type_text(node: dict[str, Any] | None) -> str:
    """A schema as a short type: a link to a named schema, `array of X`, an enum's values, a format."""
    if not node:
        return "any"
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#schema-{name.lower()})"
    for key, joiner in (("oneOf", " or "), ("anyOf", " or "), ("allOf", " and ")):
        if key in node:
            return joiner.join(type_text(n) for n in node[key])
    kind = node.get("type", "object")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array":
        text = f"array of {type_text(node.get('items'))}"
    elif "enum" in node:
        text = "one of " + ", ".join(f"`{v}`" if v != "" else '`""`' for v in node["enum"] if v is not None)
    else:
        text = f"`{kind}`" + (f" ({node['format']})" if "format" in node else "")
    if node.get("nullable"):
        text += " or `null`"
    return text


def parameters_table(parameters: list[dict[str, Any]]) -> list[str]:
    out = ["| name | in | type | required | description |", "| --- | --- | --- | --- | --- |"]
    for p in parameters:
        out.append(f"| `{p['name']}` | {p['in']} | {type_text(p.get('schema'))} | "
                   f"{'yes' if p.get('required') else 'no'} | {cell(p.get('description'))} |")
    return out


def body_text(content: dict[str, Any]) -> str:
    return "; ".join(f"{type_text(media.get('schema'))} (`{kind}`)" for kind, media in content.items())


def operation(method: str, path: str, op: dict[str, Any]) -> list[str]:
    out = [f"### `{method.upper()} {path}` {{#{operation_anchor(method, path)}}}", ""]
    if op.get("summary"):
        out += [op["summary"], ""]
    if op.get("description"):
        out += [op["description"].strip(), ""]
    if op.get("parameters"):
        out += ["**Parameters**", "", *parameters_table(op["parameters"]), ""]
    if op.get("requestBody"):
        body = op["requestBody"]
        required = " (required)" if body.get("required") else ""
        out += [f"**Request body**{required}: {body_text(body.get('content', {}))}", ""]
    out += ["**Responses**", "", "| status | description | body |", "| --- | --- | --- |"]
    for status, response in op.get("responses", {}).items():
        out.append(f"| {status} | {cell(response.get('description'))} | {body_text(response.get('content', {}))} |")
    security = [name for requirement in op.get("security", []) for name in requirement]
    if security:
        out += ["", "Authentication: " + ", ".join(f"`{s}`" for s in security) + "."]
    out.append("")
    return out


def component(name: str, node: dict[str, Any]) -> list[str]:
    out = [f"### {name} {{#schema-{name.lower()}}}", ""]
    if node.get("description"):
        out += [node["description"].strip(), ""]
    properties = node.get("properties")
    if properties:
        required = set(node.get("required", []))
        out += ["| field | type | required | description |", "| --- | --- | --- | --- |"]
        for field, prop in properties.items():
            read_only = " (read-only)" if prop.get("readOnly") else ""
            out.append(f"| `{field}` | {type_text(prop)}{read_only} | {'yes' if field in required else 'no'} | "
                       f"{cell(prop.get('description'))} |")
    elif "enum" in node:
        out.append(type_text(node)[:1].upper() + type_text(node)[1:] + ".")
    else:
        out.append(f"Type: {type_text(node)}.")
    out.append("")
    return out


def render() -> str:
    spec = schema()
    info = spec["info"]
    out = [f"The schema's own summary ({info['title']}, version {info['version']}): {info.get('description', '')}",
           ""]
    schemes = spec.get("components", {}).get("securitySchemes", {})
    if schemes:
        out += ["| authentication | how |", "| --- | --- |"]
        for name, scheme in schemes.items():
            how = scheme.get("description") or f"{scheme.get('type')} `{scheme.get('name', '')}` in {scheme.get('in')}"
            out.append(f"| `{name}` | {cell(how)} |")
        out.append("")
    out += ["## Endpoints", "", "| method | path | summary |", "| --- | --- | --- |"]
    for path, ops in spec["paths"].items():
        for method in METHODS:
            if method in ops:
                first = (ops[method].get("summary") or ops[method].get("description") or "").strip().split("\n\n")[0]
                out.append(f"| {method.upper()} | [`{path}`](#{operation_anchor(method, path)}) | {cell(first)} |")
    out.append("")
    for path, ops in spec["paths"].items():
        for method in METHODS:
            if method in ops:
                out += operation(method, path, ops[method])
    out += ["## Schemas", "", "The bodies the endpoints take and return.", ""]
    for name, node in spec.get("components", {}).get("schemas", {}).items():
        out += component(name, node)
    return "\n".join(out)
