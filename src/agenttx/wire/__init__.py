"""Generated protobuf and gRPC modules for ``agenttx.v1`` (made by ``scripts/gen_proto.py``,
which ``make`` runs; never edited by hand)."""
