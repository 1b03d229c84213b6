"""The pure engine. Imports ``agenttx.errors``, plain types and the ``Store``/``Tool`` contracts,
never a concrete store, driver or adapter."""
