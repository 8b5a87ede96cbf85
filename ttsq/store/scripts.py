"""The job protocol's Lua scripts as their callers load and call them: a script with the preludes it needs (Redis's
clock, what every ending does, the tenants' round robin), and the keys several scripts declare alike. Shared by the
protocol's two sides (:mod:`ttsq.store.queue`, the callers'; :mod:`ttsq.store.leases`, the workers') and the dead
letters' admin (:mod:`ttsq.store.dead_letters`)."""

from __future__ import annotations

from importlib.resources import files

from redis.commands.core import AsyncScript

from ttsq.domain.jobs import LANES, Job
from ttsq.store.clock import clock_lua
from ttsq.store.connection import RedisClient
from ttsq.store.keys import Keys


def lua(name: str) -> str:
    return files("ttsq.store").joinpath("lua", f"{name}.lua").read_text()


def lua_script(redis: RedisClient, name: str, *, ends_jobs: bool = False, timed: bool = True, fair: bool = False) -> AsyncScript:
    """A script from ``lua/``, with Redis's clock (``clock.lua``) in front unless it keeps no time; one that can
    end a job also gets ``finish.lua`` (owner count, webhook); one that puts jobs in line, takes them out or says
    where one stands gets ``fair.lua`` (the tenants' round robin)."""
    prelude = (clock_lua() + "\n" if timed else "") + (lua("finish") + "\n" if ends_jobs else "")
    prelude += lua("fair") + "\n" if fair else ""
    return redis.register_script(prelude + lua(name))


def home_queue(keys: Keys, job: Job) -> str:
    """The tenant queue a job waits in, in its lane (``fair.lua``'s ``lane_of``, ``tenant_of``: a record without a
    tenant waits under '-')."""
    return keys.tenant_queue(job.lane, job.tenant or "-")


def flag(value: bool) -> str:
    return "1" if value else "0"


def ending_keys(keys: Keys, job: Job) -> list[str]:
    """What ending ``job`` touches besides its own keys (``finish.lua``): its owner's count, the webhook queue.
    Declared, never built inside a script: on a Redis Cluster whose slot is moving, Redis can then refuse the
    script rather than let it write a key the move has already taken away."""
    return [keys.owner_jobs(job.owner or "-"), keys.deliveries]


def lanes(keys: Keys) -> list[str]:
    """Every lane's ring, in :data:`~ttsq.domain.jobs.LANES`' order (what every fair script declares to choose a lane)."""
    return [keys.ring(lane) for lane in LANES]


def inflight_key(keys: Keys, cache_key: str | None) -> str:
    """The job's single-flight marker; jobs without a cache key get a placeholder the scripts never touch."""
    return keys.inflight(cache_key or "-")
