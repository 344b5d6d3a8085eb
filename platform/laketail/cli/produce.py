"""``laketail produce``: records from stdin, one per line, in batched requests.

Lines are bytes (no decoding): a trailing ``\\n`` or ``\\r\\n`` is dropped, an empty
line is an empty value. With ``--key-separator SEP`` each line is ``key SEP value``
(split at the first SEP; a line without SEP is an error, as in
kafka-console-producer). Batches go to ``POST /topics/{t}[/partitions/{p}]`` as
``application/vnd.kafka.binary.v2+json`` and are sent when 500 lines or 4 MiB wait,
or when input pauses for 50 ms (so an interactive or ``tail -f`` producer sends
each line as it comes). Any error stops the command with exit 1; what was
acknowledged before stays produced, and the message says how much that was.
"""

from __future__ import annotations

import base64
import os
import select
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

import click
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from laketail.cli.gateway import BINARY_V2, JSON_V2, Gateway, segment
from laketail.cli.options import CommandError, server_option

BATCH_RECORDS = 500
BATCH_BYTES = 4 * 1024 * 1024
LINGER_S = 0.05
_READ_CHUNK = 1 << 16


def read_line_batches(
    stream: IO[bytes], max_lines: int = BATCH_RECORDS, max_bytes: int = BATCH_BYTES
) -> Iterator[list[bytes]]:
    """Lines of ``stream`` (end of line removed) in batches bounded by count and
    bytes; a batch also ends when no more input is ready within ``LINGER_S``.

    Uses the file descriptor when there is one (pipes, files, terminals); otherwise
    (an in-memory stream) reads lines as they come.
    """
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    lines = _fd_lines(fd) if fd is not None else (_strip(line) for line in stream)
    batch: list[bytes] = []
    size = 0
    for line in lines:
        if line is None:  # input paused
            if batch:
                yield batch
                batch, size = [], 0
            continue
        batch.append(line)
        size += len(line)
        if len(batch) >= max_lines or size >= max_bytes:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _strip(line: bytes) -> bytes:
    if line.endswith(b"\n"):
        line = line[:-1]
        if line.endswith(b"\r"):
            line = line[:-1]
    return line


def _fd_lines(fd: int) -> Iterator[bytes | None]:
    """Lines read straight from ``fd``; ``None`` whenever input pauses for LINGER_S."""
    pending = b""
    while True:
        if not _ready(fd, LINGER_S):
            yield None
            _ready(fd, None)
        chunk = os.read(fd, _READ_CHUNK)
        if not chunk:
            break
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line[:-1] if line.endswith(b"\r") else line
    if pending:
        yield pending[:-1] if pending.endswith(b"\r") else pending


def _ready(fd: int, timeout_s: float | None) -> bool:
    try:
        readable, _, _ = select.select([fd], [], [], timeout_s)
    except (OSError, ValueError):  # not selectable: reads simply block
        return True
    return bool(readable)


@dataclass
class ProduceTally:
    """What the broker acknowledged so far: record count and offsets per partition."""

    records: int = 0
    first_line: int = 1
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)

    def add(self, offsets: list[dict]) -> None:
        for entry in offsets:
            p, off = entry.get("partition"), entry.get("offset")
            if isinstance(p, int) and isinstance(off, int) and off >= 0:
                lo, hi = self.ranges.get(p, (off, off))
                self.ranges[p] = (min(lo, off), max(hi, off))
        self.records += len(offsets)

    def summary(self, topic: str, acks: str) -> str:
        text = f"produced {self.records} record(s) to {topic}"
        if self.ranges:
            parts = ", ".join(
                f"{p} (offsets {lo}-{hi})" if lo != hi else f"{p} (offset {lo})"
                for p, (lo, hi) in sorted(self.ranges.items())
            )
            text += f": partition{'s' if len(self.ranges) > 1 else ''} {parts}"
        elif self.records and acks == "0":
            text += " (acks=0: not acknowledged)"
        return text


def to_records(lines: list[bytes], separator: bytes | None, first_line: int) -> list[dict]:
    """One v2 binary record per line (base64 key and value)."""
    out = []
    for i, line in enumerate(lines):
        if separator is None:
            out.append({"value": _b64(line)})
            continue
        key, sep, value = line.partition(separator)
        if not sep:
            raise CommandError(
                f"line {first_line + i} has no key separator {separator.decode(errors='replace')!r}"
            )
        out.append({"key": _b64(key), "value": _b64(value)})
    return out


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@click.command()
@click.argument("topic")
@click.option("--key-separator", metavar="SEP", help="Each line is KEY SEP VALUE (split at the first SEP).")
@click.option("--partition", "-p", type=click.IntRange(min=0), help="Send every record to this partition.")
@click.option("--acks", type=click.Choice(["0", "1", "all"]), default="all", show_default=True)
@server_option
def produce(topic: str, key_separator: str | None, partition: int | None, acks: str, server: str) -> None:
    """Produce stdin's lines to TOPIC, one record per line."""
    if key_separator == "":
        raise click.BadParameter("must not be empty", param_hint="--key-separator")
    separator = key_separator.encode() if key_separator is not None else None
    path = f"/topics/{segment(topic)}"
    if partition is not None:
        path += f"/partitions/{partition}"
    if sys.stdin is None:
        raise CommandError("standard input is closed: produce reads its records from stdin")
    tally = ProduceTally()
    err = Console(stderr=True, highlight=False)
    show_progress = err.is_terminal and not sys.stdin.isatty()
    progress = Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
        console=err, transient=True, disable=not show_progress,
    )
    with Gateway(server) as gw, progress:
        task = progress.add_task(f"producing to {topic}", total=None)
        try:
            for lines in read_line_batches(sys.stdin.buffer):
                records = to_records(lines, separator, tally.records + 1)
                body = gw.request(
                    "POST", path, params={"acks": acks}, json={"records": records},
                    headers={"Content-Type": BINARY_V2, "Accept": JSON_V2},
                ) or {}
                offsets = body.get("offsets") or [{} for _ in records]
                failed = next((o for o in offsets if o.get("error_code")), None)
                if failed is not None:
                    tally.add([o for o in offsets if not o.get("error_code")])
                    raise CommandError(f"{failed.get('error') or failed['error_code']}")
                tally.add(offsets)
                progress.update(task, description=f"producing to {topic}: {tally.records} record(s)")
        except CommandError as exc:
            if tally.records:  # click's message is Final: a new error says it
                raise CommandError(f"{exc.message} (before that, {tally.summary(topic, acks)})") from exc
            raise
        except KeyboardInterrupt:
            progress.stop()
            click.echo(f"interrupted; {tally.summary(topic, acks)}", err=True)
            sys.exit(130)
    click.echo(tally.summary(topic, acks), err=True)

