"""Authentication and transport security of ``agenttx serve``: who is calling, over what.

=================  ====================================================================
``keys``           the API key file, ``KeyRing`` (secret → ``Caller``, constant time)
``grpc_auth``      the caller of a gRPC call, from its ``authorization`` metadata
``http_auth``      ASGI middleware: the caller of an HTTP request (any Starlette app)
``tls``            server credentials (gRPC) and SSL context (HTTP) from PEM files
``exposure``       the rule that a server without keys binds loopback only
=================  ====================================================================

The engine never sees a key: adapters resolve it here and pass the ``Caller``
(``agenttx.types``) with each call; the access rule itself is ``agenttx.core.access``.
This package imports ``agenttx.errors`` and ``agenttx.types`` and third-party libraries only.
"""
