"""``laketail consume``: print a topic's records, one per line, like
kafka-console-consumer.

Where each partition starts: ``--from-beginning`` (or ``--offset earliest``) at its
log start offset, ``--offset N`` at N, otherwise (or ``--offset latest``) at its end
(v2's ``end_offset``, the high watermark), so only new records show. Every partition
is followed at once, one long poll each (``GET /topics/{t}/partitions/{p}/records``,
binary embedded format), until ``--max-records`` records were printed, no record
came for ``--timeout-ms``, or Ctrl-C. Records from different partitions interleave
in arrival order; within a partition they are in offset order.

With ``--group G`` it is a member of consumer group G instead (``laketail.client.Consumer``,
like kafka-console-consumer's ``--group``): the group's coordinator assigns the
partitions, each starts at the group's committed offset (or, where G has none, at the
log start with ``--from-beginning``, else at the end: ``auto.offset.reset``), and the
positions of the records printed are committed every ``auto.commit.interval.ms`` and
once more on the way out; never a record that was not printed. ``--partition`` and
``--offset`` do not go with a group (Kafka refuses them together too).

Bytes print as UTF-8 with invalid sequences replaced; a null key or value prints as
``null`` (Kafka's formatter does the same).
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import time
from dataclasses import dataclass
from typing import IO, Any

import click

from laketail.cli.gateway import BINARY_V2, AsyncGateway, segment
from laketail.cli.options import CommandError, client_properties, server_option

#: How long one fetch waits on the broker for new records (a long poll).
POLL_MS = 1000
#: Records asked for per fetch when nothing caps it.
FETCH_RECORDS = 500


class StartOffset(click.ParamType):
    """``earliest``, ``latest`` or an offset (an int >= 0)."""

    name = "offset"

    def convert(self, value: Any, param: Any, ctx: Any) -> int | str:
        if isinstance(value, int) or value in ("earliest", "latest"):
            return value
        try:
            offset = int(value)
        except ValueError:
            self.fail(f"{value!r} is not an offset, 'earliest' or 'latest'", param, ctx)
        if offset < 0:
            self.fail(f"{offset} is negative", param, ctx)
        return offset


class RecordPrinter:
    """Writes records to a byte stream and counts them against ``max_records``;
    ``done`` is set when the count is reached or the reader went away."""

    def __init__(self, out: IO[bytes], print_key: bool, max_records: int | None) -> None:
        self.out = out
        self.print_key = print_key
        self.max_records = max_records
        self.count = 0
        self.done = asyncio.Event()
        self.last_record_at = time.monotonic()

    @property
    def remaining(self) -> int | None:
        return None if self.max_records is None else self.max_records - self.count

    def emit(self, records: list[dict]) -> None:
        if self.done.is_set():
            return
        if self.remaining is not None:
            records = records[: self.remaining]
        lines = []
        for r in records:
            value = _text(r.get("value"))
            lines.append(f"{_text(r.get('key'))}\t{value}" if self.print_key else value)
        if not lines:
            return
        try:
            self.out.write(("\n".join(lines) + "\n").encode("utf-8"))
            self.out.flush()
        except BrokenPipeError:
            _silence_stdout()
            self.done.set()
            return
        self.count += len(lines)
        self.last_record_at = time.monotonic()
        if self.remaining == 0:
            self.done.set()


def _text(encoded: str | None) -> str:
    if encoded is None:
        return "null"
    return base64.b64decode(encoded).decode("utf-8", errors="replace")


def _silence_stdout() -> None:
    """After the reader closed the pipe, keep the interpreter's final flush quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


@dataclass
class ConsumeRequest:
    topic: str
    partition: int | None
    start: int | str
    max_records: int | None
    print_key: bool
    timeout_ms: int | None


async def consume_records(server: str, req: ConsumeRequest, printer: RecordPrinter) -> None:
    """Follow the partitions until ``printer`` is done, the idle timeout passes or an
    error stops a partition (raised here)."""
    t = segment(req.topic)
    async with AsyncGateway(server) as gw:
        if req.partition is None:
            partitions = [p["partition"] for p in await gw.get(f"/topics/{t}/partitions")]
        else:
            partitions = [req.partition]
        positions = {}
        for p in partitions:
            offsets = await gw.get(f"/topics/{t}/partitions/{p}/offsets")
            positions[p] = _starting_offset(req.start, offsets)

        printer.last_record_at = time.monotonic()
        followers = [asyncio.create_task(_follow(gw, t, p, positions[p], printer)) for p in partitions]
        waiters: list[asyncio.Task[Any]] = [asyncio.create_task(printer.done.wait())]
        if req.timeout_ms is not None:
            waiters.append(asyncio.create_task(_idle(printer, req.timeout_ms / 1000)))
        try:
            finished, _ = await asyncio.wait(followers + waiters, return_when=asyncio.FIRST_COMPLETED)
            for task in finished:
                if task in followers and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        finally:
            for task in followers + waiters:
                task.cancel()
            await asyncio.gather(*followers, *waiters, return_exceptions=True)


def _starting_offset(start: int | str, offsets: dict) -> int:
    if start == "earliest":
        return int(offsets["beginning_offset"])
    if start == "latest":
        return int(offsets["end_offset"])
    return int(start)


async def _follow(gw: AsyncGateway, t: str, partition: int, offset: int, printer: RecordPrinter) -> None:
    path = f"/topics/{t}/partitions/{partition}/records"
    while not printer.done.is_set():
        wanted = min(printer.remaining or FETCH_RECORDS, FETCH_RECORDS)
        body = await gw.get(
            path,
            params={"offset": offset, "max_records": wanted, "timeout": POLL_MS},
            headers={"Accept": BINARY_V2},
            read_timeout_s=POLL_MS / 1000 + 30,
        )
        records = body.get("records", []) if isinstance(body, dict) else body or []
        if records:
            printer.emit(records)
            offset = int(records[-1]["offset"]) + 1


async def _idle(printer: RecordPrinter, timeout_s: float) -> None:
    while (left := printer.last_record_at + timeout_s - time.monotonic()) > 0:
        await asyncio.sleep(left)


#: How long one poll of the group consumer waits before checking the idle timeout.
GROUP_POLL_S = 0.5
#: With ``--timeout-ms``, how long the group consumer may wait for its first assignment
#: (the join: the group's initial rebalance delay, other members' rejoins) before the
#: idle timeout starts counting.
JOIN_WAIT_S = 60.0


def consume_in_group(server: str, req: ConsumeRequest, group: str, printer: RecordPrinter) -> None:
    """Print the records group ``group`` is assigned until ``printer`` is done or
    nothing came for ``req.timeout_ms``; commit the printed records' positions on the
    way out (besides the auto-commits)."""
    from laketail.client import Consumer, KafkaException

    conf = {
        **client_properties(),
        "bootstrap.servers": server,
        "group.id": group,
        "client.id": "laketail-console-consumer",
        "auto.offset.reset": "earliest" if req.start == "earliest" else "latest",
        "enable.auto.commit": True,
    }
    try:
        consumer = Consumer(conf)
    except (KafkaException, ValueError) as exc:
        raise CommandError(f"group consumer: {exc}") from exc
    try:
        consumer.subscribe([req.topic])
        started = printer.last_record_at = time.monotonic()
        assigned = False
        while not printer.done.is_set():
            msg = consumer.poll(GROUP_POLL_S)
            if not assigned and consumer.assignment():
                assigned = True  # the idle timeout counts from here: joining is not idling
                printer.last_record_at = time.monotonic()
            if msg is None or msg.error() is not None:
                err = None if msg is None else msg.error()
                if err is not None and err.fatal():
                    raise CommandError(str(err))
                if req.timeout_ms is not None:
                    now = time.monotonic()
                    if assigned and now - printer.last_record_at >= req.timeout_ms / 1000:
                        break
                    if not assigned and now - started >= max(JOIN_WAIT_S, req.timeout_ms / 1000):
                        raise CommandError(f"group '{group}' assigned this consumer no partition of "
                                           f"'{req.topic}' within {JOIN_WAIT_S:.0f} s")
                continue
            key, value = msg.key(), msg.value()
            printer.emit([{
                "key": None if key is None else base64.b64encode(key).decode(),
                "value": None if value is None else base64.b64encode(value).decode(),
            }])
    except KafkaException as exc:
        raise CommandError(str(exc.args[0] if exc.args else exc)) from exc
    finally:
        try:
            if printer.count:
                consumer.commit(asynchronous=False)
        except KafkaException:
            pass  # nothing to commit (no partition assigned yet)
        consumer.close()


@click.command()
@click.argument("topic")
@click.option("--partition", "-p", type=click.IntRange(min=0), help="Read only this partition [default: all].")
@click.option(
    "--offset", "-o", "start", type=StartOffset(),
    help="Start at this offset, 'earliest' or 'latest' [default: latest].",
)
@click.option("--from-beginning", is_flag=True, help="Start at each partition's log start offset.")
@click.option("--max-records", "-n", type=click.IntRange(min=1), help="Exit after this many records.")
@click.option("--print-key", is_flag=True, help="Print KEY<TAB>VALUE.")
@click.option("--timeout-ms", type=click.IntRange(min=0), help="Exit when no record arrived for this long.")
@click.option("--group", "-g", metavar="GROUP",
              help="Consume as a member of this consumer group, committing what was printed.")
@server_option
def consume(
    topic: str,
    partition: int | None,
    start: int | str | None,
    from_beginning: bool,
    max_records: int | None,
    print_key: bool,
    timeout_ms: int | None,
    group: str | None,
    server: str,
) -> None:
    """Print TOPIC's records, one value per line (new ones only, unless told where to start)."""
    if from_beginning and start is not None:
        raise click.UsageError("--offset and --from-beginning exclude each other")
    if group is not None and (partition is not None or start is not None):
        raise click.UsageError("--group does not go with --partition or --offset: the group assigns partitions")
    req = ConsumeRequest(
        topic, partition, "earliest" if from_beginning else (start if start is not None else "latest"),
        max_records, print_key, timeout_ms,
    )
    printer = RecordPrinter(sys.stdout.buffer, print_key, max_records)
    try:
        if group is not None:
            consume_in_group(server, req, group, printer)
        else:
            asyncio.run(consume_records(server, req, printer))
    except KeyboardInterrupt:
        pass
    click.echo(f"consumed {printer.count} record(s)", err=True)
