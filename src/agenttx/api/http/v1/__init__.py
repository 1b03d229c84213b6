"""The HTTP/JSON API under ``/v1``: the gRPC service's operations as JSON (docs/http.md).

operations  the routes of the operation table's rows; a request → the row's request
routes      the Starlette sub-app built from the table, behind the access check
access      where authentication plugs in (``AccessCheck``)
errors      the one error shape, HTTP statuses from ``agenttx.errors``' table
body        request bodies read within their byte limit before parsing
events      server-sent events of one transaction or of all
openapi     the OpenAPI 3.1 document, built from the same table
"""

from agenttx.api.http.v1.openapi import openapi_document
from agenttx.api.http.v1.operations import OPERATIONS, Operation
from agenttx.api.http.v1.routes import ApiSettings, api_app

__all__ = ["OPERATIONS", "ApiSettings", "Operation", "api_app", "openapi_document"]
