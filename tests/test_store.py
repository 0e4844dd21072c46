"""``Store``'s appends: one row, or many in one transaction."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from gemmtune import __version__
from gemmtune.store import Store


def row(i: int, **more) -> dict:
    return {**dict(study="s", trial=i, device="P | D | 1", device_name="D", precision="d", m=8, n=8, k=8,
                   kernel="xgemm_k5", params={"TSM": 16 * (i + 1)}, status="ok", gflops=1.5 * i), **more}


def test_add_many_appends_in_order_with_what_add_would_write(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    store.add(**row(0))
    # Rows that leave out different columns go in together, the missing ones empty.
    assert store.add_many([row(1, time_ms=2.0, baseline=True), row(2, samples_ms=[1.0, 2.5]),
                           row(3, created_at="2026-01-01")]) == 3
    frame = store.frame()
    store.close()
    assert list(frame.trial) == [0, 1, 2, 3] and list(frame.gflops) == [0.0, 1.5, 3.0, 4.5]
    assert [json.loads(p)["TSM"] for p in frame.params] == [16, 32, 48, 64]
    assert frame.time_ms.isna().tolist() == [True, False, True, True] and frame.time_ms[1] == 2.0
    assert json.loads(frame.samples_ms[2]) == [1.0, 2.5]
    assert frame.created_at[3] == "2026-01-01" and frame.created_at[1].startswith("20")
    assert set(frame.gemmtune_version) == {__version__}
    assert frame.baseline.tolist() == [False, True, False, False]


def test_add_many_writes_all_or_nothing(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    with pytest.raises(sa.exc.SQLAlchemyError):
        store.add_many([row(0), row(1, status=None)])   # a column that must be filled, empty
    assert store.frame().empty and store.add_many([]) == 0
    store.close()
