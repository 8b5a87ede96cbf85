#!/bin/sh
# This pod's sentinel: it watches the primary the other sentinels name now (pod 0 on the set's first start). Its
# configuration is written to an emptyDir (a sentinel rewrites its file as it learns the topology).
set -eu
domain="ttsq-redis-headless.ttsq.svc.cluster.local"
self="$(hostname).${domain}"
primary="$(redis-cli -h ttsq-redis -p 26379 --raw sentinel get-master-addr-by-name ttsq-primary 2>/dev/null | head -n 1 || true)"
[ -n "$primary" ] || primary="ttsq-redis-0.${domain}"
cat > /sentinel/sentinel.conf <<CONF
port 26379
dir /tmp
sentinel resolve-hostnames yes
sentinel announce-hostnames yes
sentinel announce-ip ${self}
sentinel monitor ttsq-primary ${primary} 6379 2
sentinel auth-pass ttsq-primary ${REDIS_PASSWORD}
sentinel down-after-milliseconds ttsq-primary 5000
sentinel failover-timeout ttsq-primary 60000
sentinel parallel-syncs ttsq-primary 1
CONF
exec redis-server /sentinel/sentinel.conf --sentinel
