"""``python -m ttsq keys``: the operator's key command, run as an operator runs it, against a real redis-server."""

from __future__ import annotations

import re
from typing import Any

from redis.asyncio import Redis

from tests.redis_server import RedisServer
from tests.service import ROOT
from tests.test_dead_letters import ttsq
from ttsq.store.api_keys import ApiKeyStore
from ttsq.store.keys import Keys


def listed(redis_server: RedisServer) -> list[dict[str, str]]:
    """``keys list`` read back by its header: one dict per key, column → value."""
    result = ttsq(redis_server, "keys", "list")
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    starts = [match.start() for match in re.finditer(r"\S+", header)]
    names = header.split()
    return [
        {name: row[start:end].strip() for name, start, end in zip(names, starts, [*starts[1:], None], strict=True)}
        for row in rows
    ]


async def test_keys_are_grouped_into_tenants_at_creation_and_later(redis: Redis, redis_server: RedisServer) -> None:
    created = ttsq(redis_server, "keys", "create", "--name", "billing", "--tenant", "acme")
    assert created.returncode == 0, created.stderr
    key_id = created.stdout.split("_")[1]
    assert "tenant acme" in created.stderr
    loner = ttsq(redis_server, "keys", "create", "--name", "loner").stdout.split("_")[1]
    assert {row["ID"]: row["TENANT"] for row in listed(redis_server)} == {key_id: "acme", loner: "-"}

    assert ttsq(redis_server, "keys", "tenant", loner, "acme").returncode == 0
    assert ttsq(redis_server, "keys", "tenant", key_id, "--none").returncode == 0
    assert {row["ID"]: row["TENANT"] for row in listed(redis_server)} == {key_id: "-", loner: "acme"}
    records = {record.id: record for record in await ApiKeyStore(redis, Keys("ttsq")).list()}
    assert records[loner].sharing_scope == "tenant:acme" and records[key_id].sharing_scope == f"key:{key_id}"

    assert ttsq(redis_server, "keys", "tenant", "000000000000", "acme").returncode == 1
    bad = ttsq(redis_server, "keys", "create", "--name", "x", "--tenant", "a b")
    assert bad.returncode == 2 and "tenant" in bad.stderr and bad.stdout == ""


def test_the_security_page_names_the_columns_keys_list_prints(redis_server: RedisServer, redis: Any) -> None:
    """docs/security.md says what ``keys list`` shows; it must be what the command prints, column for column."""
    page = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    documented = re.search(r"python -m ttsq keys list\s+# (.*?) — never the key", page)
    assert documented is not None, "docs/security.md no longer shows `keys list`"
    ttsq(redis_server, "keys", "create", "--name", "x")
    columns = list(listed(redis_server)[0])
    assert [word.strip().upper() for word in documented.group(1).split(",")] == columns
