"""The conformance suite (issue 23.7): each operation run with the same inputs on every surface
— the embedded engine, gRPC (a raw stub, our async client and our blocking one), MCP over
stdio and over streamable HTTP, HTTP ``/v1`` and the CLI — with the same outcome, reason code
and snapshot, and each surface's own form of it (its words, its next call, its status).

``drivers.py`` holds one driver per surface behind one interface, ``cases.py`` the table of
cases (and the operations a surface lacks), ``runner.py`` how a case runs, ``conftest.py``
starts the surfaces; ``test_lifecycle.py``, ``test_safety.py`` and ``test_compensations.py`` run
the table's three parts (three files, so ``--dist loadfile`` spreads them over the workers).

A package so its modules import as ``surfaces.<name>``; ``tests/`` stays on the path (pytest's
``prepend`` import of the rootdir conftest), so the shared harnesses import as before."""
