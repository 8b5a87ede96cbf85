"""The session engine: realtime connections and their contexts, under every protocol that streams text in and audio
out over a WebSocket (:mod:`ttsq.api.sessions.engine` says how, and what an adapter is)."""
