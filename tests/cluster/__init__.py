"""ttsq on a real local Redis Cluster (``redis-server --cluster-enabled``, :mod:`ttsq.store.local_topology`)."""
