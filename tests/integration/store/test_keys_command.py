"""``python -m ttsq keys``: the operator's key command, run as an operator runs it, against a real redis-server."""

from __future__ import annotations

import re
from typing import Any

import pytest
from redis.asyncio import Redis

from tests.integration.store.test_dead_letters import ttsq
from tests.support.redis_server import RedisServer
from tests.support.service import ROOT
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
        {name: row[start:end].strip() for name, start, end in zip(names, starts, [*starts[1:], None], strict=True)} for row in rows
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


async def test_a_lifetime_must_be_a_positive_number_of_days(redis: Redis, redis_server: RedisServer) -> None:
    """``--expires-in-days 0`` once made a key that never expired: the opposite of what it says."""
    for days in ("0", "-1", "nan", "inf", "soon"):
        refused = ttsq(redis_server, "keys", "create", "--name", "x", "--expires-in-days", days)
        assert refused.returncode == 2 and "--expires-in-days" in refused.stderr and refused.stdout == "", days
    assert await ApiKeyStore(redis, Keys("ttsq")).list() == [], "nothing was created"
    made = ttsq(redis_server, "keys", "create", "--name", "x", "--expires-in-days", "0.5")
    assert made.returncode == 0, made.stderr
    (record,) = await ApiKeyStore(redis, Keys("ttsq")).list()
    assert record.expires_at is not None and 0.49 * 86400 < record.expires_at - record.created_at < 0.51 * 86400


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://hooks.example/x", "http or https"),
        ("https://user:pw@hooks.example/x", "user name or password"),
        ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
        ("http://127.0.0.1:6379/", "loopback"),
        ("not a url", "http or https"),
    ],
)
async def test_a_keys_default_callback_url_is_checked_as_a_submits_is(
    redis: Redis, redis_server: RedisServer, url: str, why: str
) -> None:
    refused = ttsq(redis_server, "keys", "create", "--name", "x", "--callback-url", url)
    assert refused.returncode == 2 and why in refused.stderr and refused.stdout == "", refused.stderr
    assert await ApiKeyStore(redis, Keys("ttsq")).list() == []


async def test_an_allow_listed_callback_url_is_accepted_on_its_port_only(redis: Redis, redis_server: RedisServer) -> None:
    allow = {"WEBHOOK_ALLOW": "127.0.0.1:9000"}
    allowed = ttsq(redis_server, "keys", "create", "--name", "x", "--callback-url", "http://127.0.0.1:9000/hook", **allow)
    assert allowed.returncode == 0, allowed.stderr
    assert "webhooks are not configured here" in allowed.stderr, "a key whose every submit would be refused is said so"
    other_port = ttsq(redis_server, "keys", "create", "--name", "y", "--callback-url", "http://127.0.0.1:6379/", **allow)
    assert other_port.returncode == 2 and "loopback" in other_port.stderr
    assert [record.callback_url for record in await ApiKeyStore(redis, Keys("ttsq")).list()] == ["http://127.0.0.1:9000/hook"]
