"""The partition log's offsets have one owner, checked on the source (ast, as
tests/test_architecture.py does): no module but ``storage/partition_log.py`` writes a
:class:`~laketail.storage.partition_log.PartitionLog`'s high watermark or its hold on it.

Kafka moves the high watermark only through ``Partition``'s methods; here the replica
manager and the broker go through ``set_high_watermark`` (which publishes the offsets and
wakes the long polls), ``start_replication``, ``lead`` and ``follow``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OWNER = ROOT / "platform" / "laketail" / "storage" / "partition_log.py"
#: The fields only the partition log writes (the old public names too, so they do not come back).
OWNED = {"high_watermark", "_hw_follows_leo", "_on_append", "hw_follows_leo", "on_append"}


def owned_field_writes(source: str) -> list[str]:
    """Every ``x.field = ...`` / ``x.field += ...`` / ``del x.field`` of an :data:`OWNED`
    field in ``source``, as ``line: statement`` (``self.field`` too: a class of another
    module holding a field of that name is still a second writer to keep apart)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)) and node.attr in OWNED:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_only_the_partition_log_writes_its_high_watermark() -> None:
    offenders = {
        str(path.relative_to(ROOT)): hits
        for base in ("platform", "api", "jobs", "tests")
        for path in sorted((ROOT / base).rglob("*.py"))
        if path != OWNER and (hits := owned_field_writes(path.read_text()))
    }
    assert offenders == {}


def test_the_owner_does_write_them() -> None:
    """The check sees the writes where they belong (it is not blind)."""
    hits = owned_field_writes(OWNER.read_text())
    assert any("self.high_watermark" in h for h in hits)
    assert any("self._on_append" in h for h in hits)


def test_the_check_catches_each_form_of_write() -> None:
    source = "plog.high_watermark = 3\nplog.high_watermark += 1\ns.plog.on_append = None\ndel p._hw_follows_leo\n"
    assert owned_field_writes(source) == [
        "1: plog.high_watermark", "2: plog.high_watermark", "3: s.plog.on_append", "4: p._hw_follows_leo"]
    assert owned_field_writes("x = plog.high_watermark\nplog.set_high_watermark(3)\n") == []
