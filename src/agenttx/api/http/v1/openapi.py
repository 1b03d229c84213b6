"""The OpenAPI 3.1 document of ``/v1``, built from the operation table: request bodies and
queries from their pydantic models, replies from their protobuf descriptors read the way
``agenttx.api.fields`` turns a message into JSON. Only the error shape and the two event
streams are written out here; every operation comes from the table, so the document cannot
drift from what the routes do.
"""

from __future__ import annotations

import re
from typing import Any

from google.protobuf.descriptor import FieldDescriptor

from agenttx.api.fields import enum_prefix
from agenttx.api.http.v1.errors import ERROR_STATUSES
from agenttx.api.http.v1.operations import (
    OPERATIONS,
    PATH_NUMBERS,
    TRANSACTION_ID_SCHEMA,
    Operation,
)
from agenttx.api.operations.bodies import BEGIN_WITHOUT_KEYS
from agenttx.numbers import AFTER_REVISION, WholeNumber

_SCALARS: dict[str, dict[str, Any]] = {
    "TYPE_DOUBLE": {"type": "number"},
    "TYPE_FLOAT": {"type": "number"},
    "TYPE_INT64": {"type": "integer"},
    "TYPE_UINT64": {"type": "integer", "minimum": 0},
    "TYPE_INT32": {"type": "integer"},
    "TYPE_UINT32": {"type": "integer", "minimum": 0},
    "TYPE_BOOL": {"type": "boolean"},
    "TYPE_STRING": {"type": "string"},
    "TYPE_BYTES": {"type": "string"},
}

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "reason", "message", "details", "continuation"],
            "properties": {
                "code": {"type": "string", "description": "the gRPC status name"},
                "reason": {"type": "string", "description": "the error's stable name"},
                "message": {"type": "string"},
                "details": {"type": "object", "description": "the error's data fields"},
                "continuation": {
                    "type": "object",
                    "required": ["kind", "instruction"],
                    "properties": {
                        "kind": {
                            "type": "string",
                            "enum": [
                                "CallTool",
                                "ChooseTool",
                                "RetryRequest",
                                "ReviseRequest",
                                "ResolveExternally",
                            ],
                        },
                        "instruction": {"type": "string"},
                        "operation": {
                            "type": "string",
                            "description": "the route to call next (CallTool)",
                        },
                        "operations": {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "the routes to choose from (ChooseTool)",
                        },
                    },
                },
            },
        }
    },
}


def message_schema(descriptor: Any, components: dict[str, Any]) -> dict[str, Any]:
    """A ``$ref`` to the JSON schema of a message as ``message_fields(short_enums=True)``
    writes it, adding it (and the messages it holds) to ``components``."""
    name = descriptor.name
    ref = {"$ref": f"#/components/schemas/{name}"}
    if name in components:
        return ref
    components[name] = {}  # placeholder: a message may hold itself
    props: dict[str, Any] = {}
    for fd in descriptor.fields:
        key = fd.name
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            schema: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}
        elif fd.message_type is not None:
            schema = message_schema(fd.message_type, components)
        elif fd.enum_type is not None:
            prefix = enum_prefix(fd.enum_type.name)
            schema = {
                "type": "string",
                "enum": [v.name.removeprefix(prefix) for v in fd.enum_type.values],
            }
        elif fd.name.endswith("_json") and not fd.is_repeated:
            key = fd.name.removesuffix("_json")
            schema = {
                "description": f"any JSON value (the wire's {fd.name}, parsed); null if empty"
            }
        else:
            schema = dict(_scalar(fd))
        if fd.is_repeated and not (
            fd.message_type is not None and fd.message_type.GetOptions().map_entry
        ):
            schema = {"type": "array", "items": schema}
        props[key] = schema
    components[name] = {"type": "object", "properties": props, "required": sorted(props)}
    return ref


# FieldDescriptor.TYPE_* number -> its name, the key of _SCALARS.
_TYPE_NAMES = {v: k for k, v in vars(FieldDescriptor).items() if k.startswith("TYPE_")}


def _scalar(fd: Any) -> dict[str, Any]:
    return _SCALARS[str(_TYPE_NAMES[fd.type])]


def _integer(number: WholeNumber) -> dict[str, Any]:
    return {"type": "integer", "minimum": number.low, "maximum": number.high}


def _path_params(path: str) -> list[dict[str, Any]]:
    """A path's parameters: a number in the range the operation reads it with
    (``PATH_NUMBERS``), else a transaction id."""
    return [
        {
            "name": p,
            "in": "path",
            "required": True,
            "schema": _integer(PATH_NUMBERS[p])
            if p in PATH_NUMBERS
            else dict(TRANSACTION_ID_SCHEMA),
        }
        for p in re.findall(r"{(\w+)}", path)
    ]


def _model_schema(model: Any, components: dict[str, Any]) -> dict[str, Any]:
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, sub in schema.pop("$defs", {}).items():
        components.setdefault(name, sub)
    components[model.__name__] = schema
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _operation(op: Operation, components: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "operationId": op.operation_id,
        "summary": op.route.summary,
        "parameters": _path_params(op.path),
        "responses": {
            "200": {
                "description": "OK",
                "content": {
                    "application/json": {
                        "schema": message_schema(op.row.reply.DESCRIPTOR, components)
                    }
                },
            },
            **{
                str(status): {
                    "description": "refused (the one error shape)",
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}
                    },
                }
                for status in ERROR_STATUSES
            },
        },
    }
    route = op.route
    if route.query is not None:
        q = route.query.model_json_schema()
        required = set(q.get("required", ()))  # a field without a default
        for name, prop in q.get("properties", {}).items():
            param: dict[str, Any] = {
                "name": name,
                "in": "query",
                "required": name in required,
                "schema": prop,
            }
            if prop.get("type") == "array":
                param["explode"] = True
            out["parameters"].append(param)
    if route.body is not None:
        out["requestBody"] = {
            "required": not route.body_optional,
            "content": {"application/json": {"schema": _model_schema(route.body, components)}},
        }
    return out


def _events(components: dict[str, Any]) -> dict[str, Any]:
    from agenttx.wire import agenttx_pb2 as pb

    def data(schema: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": schema,
        }

    # The schema of one event (as OpenAPI 3.2's itemSchema, which a 3.1 stream's schema is
    # read as): the fields ``events._frame`` and ``events._error_frame`` write.
    event = {
        "oneOf": [
            {
                "type": "object",
                "required": ["event", "id", "data"],
                "properties": {
                    "event": {"const": "transaction"},
                    "id": {"type": "string", "pattern": "^[0-9]+$", "description": "revision"},
                    "data": data(message_schema(pb.TransactionEvent.DESCRIPTOR, components)),
                },
            },
            {
                "type": "object",
                "required": ["event", "data"],
                "description": "the last event of a stream its key no longer may read",
                "properties": {
                    "event": {"const": "error"},
                    "data": data({"$ref": "#/components/schemas/Error"}),
                },
            },
        ]
    }
    stream = {
        "description": "text/event-stream: `event: transaction`, `id: <revision>`, `data:` a "
        "TransactionEvent as JSON; a stream that loses its key's right to read ends with "
        "`event: error` and the error body",
        "content": {"text/event-stream": {"schema": event}},
    }
    error = {
        "description": "refused (the one error shape)",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    return {
        "/v1/transactions/{transaction_id}/events": {
            "get": {
                "operationId": "WatchTransaction",
                "summary": "The transaction's state changes as server-sent events, until it ends",
                "parameters": [
                    *_path_params("{transaction_id}"),
                    {
                        "name": "after_revision",
                        "in": "query",
                        "required": False,
                        "schema": _integer(AFTER_REVISION),
                    },
                ],
                "responses": {
                    "200": stream,
                    "204": {
                        "description": "the transaction has ended and its last state is at "
                        "or before after_revision: nothing more will come (an EventSource "
                        "stops reconnecting)"
                    },
                    "400": error,
                    "401": error,
                    "403": error,
                    "404": error,
                    "503": error,
                },
            }
        },
        "/v1/events": {
            "get": {
                "operationId": "WatchAll",
                "summary": "Every transaction's state changes as server-sent events (with API "
                "keys: those the key may read)",
                "responses": {"200": stream, "401": error, "503": error},
            }
        },
    }


def openapi_document(
    version: str,
    operations: tuple[Operation, ...] = OPERATIONS,
    *,
    events: bool = True,
    api_keys: bool = False,
) -> dict[str, Any]:
    """The document; ``api_keys``: the server needs a key on every call (``--api-keys``),
    stated as a bearer scheme that every operation requires."""
    components: dict[str, Any] = {"Error": ERROR_SCHEMA}
    paths: dict[str, Any] = {}
    for op in operations:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op, components)
    if events:
        paths.update(_events(components))
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "AgentTx HTTP/JSON API",
            "version": version,
            "description": "Transactional tool calls for AI agents: the gRPC service "
            "agenttx.v1.AgentTxService over HTTP/JSON, field names as on the wire (docs/http.md).",
        },
        "paths": paths,
        "components": {"schemas": components},
    }
    if not api_keys and "BeginBody" in components:
        components["BeginBody"] = {**components["BeginBody"], **BEGIN_WITHOUT_KEYS}
    if api_keys:
        document["security"] = [{"apiKey": []}]
        document["components"]["securitySchemes"] = {
            "apiKey": {
                "type": "http",
                "scheme": "bearer",
                "description": "an API key of the server's key file (docs/security.md)",
            }
        }
    return document
