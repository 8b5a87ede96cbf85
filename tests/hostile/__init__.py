"""Hostile clients of the realtime route and the HTTP server: compressed WebSocket bombs, oversized and unfinished
frames, sessions that flood small messages, idle and trickling TCP connections (``make hostile-realtime``; a bounded
version runs in ``make test``: ``test_hostile.py``)."""
