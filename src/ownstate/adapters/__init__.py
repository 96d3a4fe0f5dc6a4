"""Framework adapters: each maps one agent framework's storage interface onto ownstate.

Import the adapter you use (``ownstate.adapters.langgraph``, ...); each needs its
framework's package (the ``langgraph``, ``openai-agents``, ``adk`` or ``claude`` extra).
Every adapter is built from a connected client (sync or async) or from a URL.

It may touch nothing itself: it imports no adapter, so importing it needs no framework.
"""
