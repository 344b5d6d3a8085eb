"""Two brokers tiering the same records at once (an old leader that has not yet heard it
was replaced, and the new one): the Jepsen run found offsets 3668-3683 of jepsen-1 in two
data files, and every read of them failed CORRUPT_MESSAGE. A tier commit that meets a
concurrent commit retried blindly; it now retries only while the table is still tiered
where its plan starts."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable, Transaction

from laketail.storage import tierer
from laketail.storage.data_files import write_data_file
from laketail.storage.table_reader import tier_app_id
from tests.maintenance.test_table_commit import NOW_MS, Table, _rows


def test_two_brokers_tiering_the_same_records_at_once_commit_them_once(tmp_path):
    table = Table(tmp_path)
    table.tier(0, _rows(0, [None] * 3, [b"a"] * 3, NOW_MS))
    planned_at = DeltaTable(table.uri)  # the new leader plans from offset 3
    table.tier(0, _rows(3, [None] * 2, [b"b"] * 2, NOW_MS))  # the old leader commits 3-4 meanwhile
    _, add, _ = write_data_file(table.uri, 0, _rows(3, [None] * 4, [b"b"] * 4, NOW_MS), NOW_MS)

    with pytest.raises(tierer.TableAhead) as ahead:
        tierer._commit(planned_at, [add], [Transaction(tier_app_id(0), 7)], {0: 3})

    assert ahead.value.ahead == {0: 5}
    now = DeltaTable(table.uri)
    assert now.transaction_version(tier_app_id(0)) == 5
    assert len(now.file_uris()) == 2  # offsets 3-4 once, in the old leader's file
