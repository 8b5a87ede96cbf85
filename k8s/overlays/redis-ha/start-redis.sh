#!/bin/sh
# This pod's redis-server: a replica of the primary the sentinels name now; when none answers (the set's first
# start), pod 0 is the primary and the others its replicas. Asking first means a restarted old primary comes
# back as a replica of the promoted one instead of a second primary. Every server refuses writes while it is a
# primary with no replica within 10 s of lag (min-replicas-*): an old primary whose replica was promoted then takes
# no write the failover would discard (docs/scale-out.md#redis-sentinel).
set -eu
domain="ttsq-redis-headless.ttsq.svc.cluster.local"
self="$(hostname).${domain}"
primary="$(redis-cli -h ttsq-redis -p 26379 --raw sentinel get-master-addr-by-name ttsq-primary 2>/dev/null | head -n 1 || true)"
[ -n "$primary" ] || primary="ttsq-redis-0.${domain}"
set -- /etc/redis/redis.conf --requirepass "$REDIS_PASSWORD" --masterauth "$REDIS_PASSWORD" --replica-announce-ip "$self" \
    --min-replicas-to-write 1 --min-replicas-max-lag 10
[ "$primary" = "$self" ] || set -- "$@" --replicaof "$primary" 6379
exec redis-server "$@"
