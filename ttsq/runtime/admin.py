"""Operator commands that talk to Redis directly: ``python -m ttsq keys create|list|tenant|weight|revoke`` and
``python -m ttsq dead-letters list|show|requeue|purge``.

Run them where the queue's Redis is reachable (a shell in an API pod, the GPU host); they read the
same settings as the processes (``REDIS_URL`` and friends). A key is printed once, on the first
line of standard output, and never stored: only its SHA-256 is.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from ttsq.domain.jobs import PRIORITIES
from ttsq.domain.ssrf import RefusedUrl, SsrfGuard, UnresolvableUrl
from ttsq.store.api_keys import MAX_WEIGHT, SCOPES, ApiKeyStore, Scope
from ttsq.store.connection import RedisConfig, create_redis
from ttsq.store.dead_letters import DeadLetters
from ttsq.store.keys import Keys
from ttsq.store.queue import JobQueue, QueueConfig
from ttsq.store.replies import Requeued


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ttsq", description="Manage ttsq (talks to its Redis directly).")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    keys = commands.add_parser("keys", help="API keys: create, list, group into tenants, revoke")
    actions = keys.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="create a key and print it (once)")
    create.add_argument("--name", required=True, help="who or what the key is for")
    create.add_argument("--scopes", default="tts", help=f"comma-separated, of {', '.join(SCOPES)} (default: tts)")
    create.add_argument(
        "--expires-in-days", type=_days, help="the key stops working after this many days (more than 0; leave it out: never)"
    )
    create.add_argument(
        "--callback-url", help="default completion webhook for this key's submits (checked as a submit's callback_url is)"
    )
    create.add_argument(
        "--tenant", help="group the key into this tenant: its keys share cached results and jobs in flight (CACHE_SCOPE=tenant)"
    )
    create.add_argument("--weight", type=int, default=1, help=f"share of the workers, 1-{MAX_WEIGHT} (default 1; docs/fairness.md)")
    create.add_argument("--priority", choices=PRIORITIES, default="interactive", help="lane of submits that name none")
    actions.add_parser("list", help="list keys (never the keys themselves)")
    weight = actions.add_parser("weight", help="set a key's share of the workers (claims per fair-queuing turn)")
    weight.add_argument("key_id", help="the key's id (the 12 hex characters after 'ttsq_')")
    weight.add_argument("weight", type=int, help=f"1-{MAX_WEIGHT}")
    tenant = actions.add_parser("tenant", help="group a key into a tenant, or (--none) make it a tenant of its own")
    tenant.add_argument("key_id", help="the key's id (the 12 hex characters after 'ttsq_')")
    which_tenant = tenant.add_mutually_exclusive_group(required=True)
    which_tenant.add_argument("name", nargs="?", help="the tenant's name")
    which_tenant.add_argument("--none", action="store_true", help="a tenant of its own (shares with no other key)")
    revoke = actions.add_parser("revoke", help="revoke a key at once, on every API replica")
    revoke.add_argument("key_id", help="the key's id (the 12 hex characters after 'ttsq_')")

    dead = commands.add_parser("dead-letters", help="jobs that failed for good: list, show, requeue, purge")
    dead_actions = dead.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = dead_actions.add_parser("list", help="newest first: id, when, attempts, reason")
    listing.add_argument("--limit", type=int, default=50)
    show = dead_actions.add_parser("show", help="one dead letter's whole record (JSON)")
    show.add_argument("task_id")
    requeue = dead_actions.add_parser("requeue", help="queue it again under the same id (waiting clients get it)")
    requeue.add_argument("task_ids", nargs="+", metavar="task_id")
    purge = dead_actions.add_parser("purge", help="drop dead letters (their tasks still read 'failed' until they expire)")
    which = purge.add_mutually_exclusive_group(required=True)
    which.add_argument("task_ids", nargs="*", metavar="task_id", default=[])
    which.add_argument("--all", action="store_true", help="drop every dead letter")
    return parser


def _days(text: str) -> float:
    """A key's lifetime in days: a positive, finite number. ``0`` once made a key that never expired."""
    try:
        days = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of days: {text!r}") from None
    if not math.isfinite(days) or days <= 0:
        never = "leave --expires-in-days out for a key that never expires"
        raise argparse.ArgumentTypeError(f"must be more than 0 days ({never}); got {text}")
    return days


async def _check_callback(url: str, guard: SsrfGuard, webhooks_configured: bool) -> str | None:
    """Why a key's default ``callback_url`` would be refused at every submit (None: it would not).

    The same checks as a submit's: http(s) without credentials, and an address that is public or allow-listed
    (``WEBHOOK_ALLOW``). A name that does not resolve now is accepted, as at submit (the receiver may not be up).
    """
    try:
        await guard.check(url)
    except RefusedUrl as exc:
        return str(exc)
    except UnresolvableUrl:
        pass
    if not webhooks_configured:
        print(
            "ttsq: note: webhooks are not configured here (WEBHOOK_SECRET, PUBLIC_URL); an API without them refuses "
            "every submit of a key with a callback_url",
            file=sys.stderr,
        )
    return None


def _when(stamp: float | None) -> str:
    return "never" if stamp is None else datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M UTC")


@dataclass(frozen=True)
class Callbacks:
    """What ``keys create --callback-url`` checks a URL with: the API's own SSRF guard (``WEBHOOK_ALLOW``), and
    whether webhooks are configured (``WEBHOOK_SECRET`` and ``PUBLIC_URL``)."""

    guard: SsrfGuard
    configured: bool


async def run(args: argparse.Namespace, redis_config: RedisConfig, queue_config: QueueConfig, callbacks: Callbacks) -> int:
    if args.command == "keys" and args.action == "create" and args.callback_url is not None:
        refused = await _check_callback(args.callback_url, callbacks.guard, callbacks.configured)
        if refused is not None:
            print(f"ttsq: --callback-url is refused: {refused}", file=sys.stderr)
            return 2
    redis = create_redis(redis_config)
    try:
        if args.command == "dead-letters":
            return await dead_letters(args, JobQueue(redis, queue_config))
        store = ApiKeyStore(redis, Keys(queue_config.namespace))
        if args.action == "create":
            scopes: list[Scope] = [scope for scope in SCOPES if scope in {s.strip() for s in args.scopes.split(",")}]
            unknown = {s.strip() for s in args.scopes.split(",")} - set(SCOPES)
            if unknown:
                print(f"ttsq: unknown scope(s) {', '.join(sorted(unknown))}; use {', '.join(SCOPES)}", file=sys.stderr)
                return 2
            expires = time.time() + args.expires_in_days * 86400 if args.expires_in_days is not None else None
            if not 1 <= args.weight <= MAX_WEIGHT:
                print(f"ttsq: a weight is 1-{MAX_WEIGHT}; got {args.weight}", file=sys.stderr)
                return 2
            try:
                key, record = await store.create(
                    args.name,
                    scopes,
                    expires_at=expires,
                    callback_url=args.callback_url,
                    tenant=args.tenant,
                    weight=args.weight,
                    priority=args.priority,
                )
            except ValueError as exc:
                print(f"ttsq: {exc}", file=sys.stderr)
                return 2
            print(key)
            print(
                f"created key {record.id} ({record.name}; scopes {', '.join(record.scopes)}; expires {_when(record.expires_at)}"
                f"{f'; tenant {record.tenant}' if record.tenant else ''}). It is shown only now: store it.",
                file=sys.stderr,
            )
            return 0
        if args.action == "list":
            records = await store.list()
            head = f"{'ID':<12}  {'NAME':<24}  {'SCOPES':<10}  {'TENANT':<16}  {'CREATED':<20}  {'EXPIRES':<20}"
            print(f"{head}  {'WEIGHT':>6}  PRIORITY")
            for record in records:
                print(
                    f"{record.id:<12}  {record.name[:24]:<24}  {','.join(record.scopes):<10}  {(record.tenant or '-')[:16]:<16}  "
                    f"{_when(record.created_at):<20}  {_when(record.expires_at):<20}  {record.weight:>6}  {record.priority}"
                )
            return 0
        if args.action == "weight":
            return await set_weight(store, args.key_id, args.weight)
        if args.action == "tenant":
            try:
                grouped = await store.set_tenant(args.key_id, None if args.none else args.name)
            except ValueError as exc:
                print(f"ttsq: {exc}", file=sys.stderr)
                return 2
            if grouped is None:
                print(f"ttsq: no key with id {args.key_id!r}", file=sys.stderr)
                return 1
            print(f"key {grouped.id} is " + (f"in tenant {grouped.tenant}" if grouped.tenant else "a tenant of its own"))
            return 0
        if await store.revoke(args.key_id):
            print(f"revoked key {args.key_id}: every API replica refuses it from its next request on")
            return 0
        print(f"ttsq: no key with id {args.key_id!r}", file=sys.stderr)
        return 1
    finally:
        await redis.aclose()


async def set_weight(store: ApiKeyStore, key_id: str, weight: int) -> int:
    if not 1 <= weight <= MAX_WEIGHT:
        print(f"ttsq: a weight is 1-{MAX_WEIGHT}; got {weight}", file=sys.stderr)
        return 2
    record = await store.set_weight(key_id, weight)
    if record is None:
        print(f"ttsq: no key with id {key_id!r}", file=sys.stderr)
        return 1
    print(f"key {key_id} now has weight {weight}: its tenant's next submit on each shard carries it into the round robin")
    return 0


async def dead_letters(args: argparse.Namespace, queue: JobQueue) -> int:
    dead = DeadLetters(queue)
    if args.action == "list":
        jobs = await dead.newest(args.limit)
        print(f"{'TASK ID':<52}  {'FAILED':<20}  {'TRIES':>5}  REASON")
        for job in jobs:
            reason = (job.error or "unknown").replace("\n", " ")
            print(f"{job.id:<52}  {_when(job.finished_at):<20}  {job.attempts:>5}  {reason[:100]}")
        print(f"{len(jobs)} dead letter(s) shown", file=sys.stderr)
        return 0
    if args.action == "show":
        found = await dead.get(args.task_id)
        if found is None:
            print(f"ttsq: no dead letter {args.task_id!r}", file=sys.stderr)
            return 1
        print(found.model_dump_json(indent=2, exclude={"params": {"speaker_embedding"}}))
        return 0
    if args.action == "requeue":
        status = 0
        for task_id in args.task_ids:
            outcome = await dead.requeue(task_id)
            if outcome is Requeued.REQUEUED:
                print(f"requeued {task_id}: same id, attempts start again, it runs alone")
            else:
                why = "no such dead letter" if outcome is Requeued.MISSING else "its task is active again"
                print(f"ttsq: {task_id}: {why}; nothing changed", file=sys.stderr)
                status = 1
        return status
    removed = await dead.purge(None) if args.all else sum([await dead.purge(t) for t in args.task_ids])
    print(f"purged {removed} dead letter(s)")
    return 0 if removed or args.all else 1


def main(argv: Sequence[str], redis_config: RedisConfig, queue_config: QueueConfig, callbacks: Callbacks) -> int:
    return asyncio.run(run(build_parser().parse_args(argv), redis_config, queue_config, callbacks))
