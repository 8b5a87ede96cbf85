"""``bench.engine.quiet_decode`` on the tiny checkpoint: it drives the serving path's audio work both ways, and a row
nobody listens to comes out as the whole decode, bit for bit."""

from __future__ import annotations

from typing import Any

from bench.engine.quiet_decode import measure


def test_a_row_nobody_listens_to_is_the_whole_decode_bit_for_bit_and_the_table_has_every_length(tiny_checkpoint_dir: Any) -> None:
    lines = measure("tiny", [48, 120], 1)
    rows = [line for line in lines if line.startswith(("| 48 ", "| 120 "))]
    assert len(rows) == 2
    assert all("| bit for bit |" in row for row in rows), rows
