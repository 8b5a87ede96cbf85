"""The API process's library: use cases (:mod:`ttsq.api.service`), HTTP schemas and error mapping. Never imports torch."""
