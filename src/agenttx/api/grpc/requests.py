"""A gRPC request's bytes into its message, checked before a handler sees it.

gRPC hands a request's bytes to the method's deserializer; one that raises becomes
``UNKNOWN: Unexpected <class 'DecodeError'>``, and a ``uint64`` past what a store's integer
holds (2⁶³−1) became INTERNAL deep in the driver. Here both are answers: the deserializer
(``Decoder``) returns a ``Malformed`` in place of the message — malformed bytes, a string
field that is not UTF-8 (named), or a 64-bit field out of range (named, with its range, in the
words of ``agenttx.numbers``) — and the handler wrapped around the servicer's method
(``checked``) fails such a call with INVALID_ARGUMENT before the method runs.

The 64-bit fields of each request type, nested messages included, are found once from its
descriptor (``_wide_fields``); a request without any costs one dictionary lookup.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

from agenttx.numbers import MAX_INT64, WholeNumber

# A message descriptor (the pure-Python class or upb's: the installed protobuf decides).
Descriptor = Any


@dataclass(frozen=True, slots=True)
class Malformed:
    """What a request that cannot be handled decodes to: why, for the caller."""

    message: str


_WIDE_TYPES = frozenset(
    (
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    )
)
# A path of field names to a 64-bit field: ("policy", "max"), or ("after_seq",).
_Path = tuple[str, ...]
_PATHS: dict[Descriptor, tuple[tuple[_Path, WholeNumber], ...]] = {}


def _wide_fields(descriptor: Descriptor) -> tuple[tuple[_Path, WholeNumber], ...]:
    """Every singular 64-bit field reachable through singular message fields (the request
    types have no repeated ones), with the range a store can hold."""
    found = _PATHS.get(descriptor)
    if found is not None:
        return found
    paths: list[tuple[_Path, WholeNumber]] = []
    stack: list[tuple[Descriptor, _Path, frozenset[Descriptor]]] = [(descriptor, (), frozenset())]
    while stack:
        message, prefix, seen = stack.pop()
        for field in message.fields:
            if field.is_repeated:
                continue
            if field.type in _WIDE_TYPES:
                unsigned = field.type in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64)
                low = 0 if unsigned else -MAX_INT64 - 1
                paths.append(((*prefix, field.name), WholeNumber(field.name, low, MAX_INT64)))
            elif field.message_type is not None and field.message_type not in seen:
                stack.append((field.message_type, (*prefix, field.name), seen | {message}))
    _PATHS[descriptor] = found = tuple(paths)
    return found


def _out_of_range(request: Message, paths: tuple[tuple[_Path, WholeNumber], ...]) -> str:
    for path, number in paths:
        holder: Any = request
        for name in path[:-1]:
            if not holder.HasField(name):
                break
            holder = getattr(holder, name)
        else:
            value = getattr(holder, path[-1])
            if not number.low <= value <= number.high:
                return number.refusal(value).message
    return ""


class Decoder:
    """The deserializer of one request type: the message, or ``Malformed`` saying why."""

    def __init__(self, request_type: type[Message]) -> None:
        self.request_type = request_type
        self.name = request_type.DESCRIPTOR.full_name
        self.paths = _wide_fields(request_type.DESCRIPTOR)

    def __call__(self, data: bytes) -> Message | Malformed:
        try:
            request = self.request_type.FromString(data)
        except DecodeError as exc:
            return Malformed(self._why(data, exc))
        if self.paths:
            why = _out_of_range(request, self.paths)
            if why:
                return Malformed(why)
        return request

    def _why(self, data: bytes, exc: DecodeError) -> str:
        said = str(exc).rpartition(": ")[2] or "the bytes are malformed"
        if "UTF-8" in said:
            field = _bad_text_field(self.request_type.DESCRIPTOR, data)
            if field:
                return (
                    f"the request is not a valid {self.name}: its field {field} is not valid "
                    "UTF-8 (a protobuf string must be); send text, or bytes elsewhere"
                )
        return (
            f"the request is not a valid {self.name} ({said}, {len(data)} bytes): send a "
            "message serialised from the agenttx.v1 schema"
        )


def _bad_text_field(descriptor: Descriptor, data: bytes) -> str:
    """The name of a top-level string field of ``data`` whose bytes are not UTF-8 (for the
    message); "" if it lies deeper or the bytes cannot be walked. Linear, no recursion."""
    at, end = 0, len(data)
    while at < end:
        key, at = _varint(data, at)
        if at < 0:
            return ""
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            _, at = _varint(data, at)
        elif wire_type == 1:
            at += 8
        elif wire_type == 5:
            at += 4
        elif wire_type == 2:
            size, at = _varint(data, at)
            if at < 0 or at + size > end:
                return ""
            field = descriptor.fields_by_number.get(number)
            if field is not None and field.type == FieldDescriptor.TYPE_STRING:
                try:
                    data[at : at + size].decode("utf-8")
                except UnicodeDecodeError:
                    return str(field.name)
            at += size
        else:
            return ""
        if at < 0:
            return ""
    return ""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint at ``at`` and where it ends, or (0, -1) if the bytes end first."""
    value = shift = 0
    while at < len(data) and shift < 70:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    return 0, -1


Unary = Callable[[Any, grpc.aio.ServicerContext], Coroutine[Any, Any, Any]]
Streaming = Callable[[Any, grpc.aio.ServicerContext], AsyncIterator[Any]]


def checked_unary(behaviour: Unary) -> Unary:
    """``behaviour``, except that a ``Malformed`` request fails with INVALID_ARGUMENT."""

    async def handle(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        return await behaviour(request, context)

    return handle


def checked_streaming(behaviour: Streaming) -> Streaming:
    async def handle(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        if isinstance(request, Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        async for item in behaviour(request, context):
            yield item

    return handle


def add_service(servicer: Any, server: Any, service: Any, messages: Any, service_name: str) -> None:
    """Register ``servicer``'s methods of ``service`` (a ServiceDescriptor) on ``server`` as
    the generated ``add_…_to_server`` does, with checked requests. ``messages``: the
    generated module holding the message classes."""
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in service.methods:
        request_type = getattr(messages, method.input_type.name)
        reply_type = getattr(messages, method.output_type.name)
        behaviour = getattr(servicer, method.name)
        if method.client_streaming:  # the schema has none; a new one needs its own wrapper
            raise TypeError(f"{method.name}: client-streaming methods are not served")
        if method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                checked_streaming(behaviour),
                request_deserializer=Decoder(request_type),
                response_serializer=reply_type.SerializeToString,
            )
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                checked_unary(behaviour),
                request_deserializer=Decoder(request_type),
                response_serializer=reply_type.SerializeToString,
            )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service_name, handlers),))
    server.add_registered_method_handlers(service_name, handlers)
