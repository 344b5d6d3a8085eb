"""Confluent Schema Registry's state and operations, kept in the ``__schemas`` topic.

Role: subjects, their versions, global schema ids, compatibility configs and modes,
as Confluent Schema Registry keeps them in its ``_schemas`` topic. laketail names the
topic ``__schemas``: its internal-topic prefix, so clients cannot append to it (only
this registry does, with ``internal_topics_allowed``), the broker key-compacts it and
sizes it by its own rule (one partition, replicated like the coordinators' topics).

Records (typed JSON keys, so compaction keeps the latest value of each; a null value
is a tombstone)::

    {"keytype":"SCHEMA","subject":S,"version":V}  {"subject","version","id","schemaType",
                                                   "schema","references","deleted"}
    {"keytype":"CONFIG","subject":S|null}          {"compatibilityLevel": L}
    {"keytype":"MODE","subject":S|null}            {"mode": M}
    {"keytype":"NEXT_ID"}                          {"next_id": N}

``NEXT_ID`` (laketail's, not Confluent's) is written in the same batch as the first
version of a new schema, so an id freed by hard deletes and compaction is never handed
out again. Ids are global: the same (type, canonical text, references) under any
subject has one id.

One way for state to change: :meth:`SchemaRegistry.replay` applies one record, the same
call at :meth:`load` and after a write. Writes validate first (nothing is written for a
refused request), append every record of the change in one batch with acks=all, then
replay them. Loading is forgiving: a record that cannot be decoded is skipped, logged
and counted (:attr:`skipped_records`).

Thread-safety: event loop thread only; one asyncio lock orders the writes.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa

from laketail.records import data_records
from laketail.schemas import compatibility as compat
from laketail.schemas.errors import (
    IncompatibleSchema,
    InvalidMode,
    InvalidSchema,
    InvalidVersion,
    OperationNotPermitted,
    ReferenceExists,
    SchemaNotFound,
    SubjectCompatibilityNotConfigured,
    SubjectModeNotConfigured,
    SubjectNotFound,
    SubjectNotSoftDeleted,
    SubjectSoftDeleted,
    VersionNotFound,
    VersionNotSoftDeleted,
    VersionSoftDeleted,
)

if TYPE_CHECKING:
    from laketail.coordinator.ports import CoordinatorLog

log = logging.getLogger(__name__)

SCHEMAS_TOPIC = "__schemas"
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
MAX_VERSION = 2**31 - 1


@dataclass(frozen=True)
class StoredSchema:
    schema_type: compat.SchemaType
    schema: str  # canonical text
    references: tuple[tuple[str, str, int], ...] = ()  # (name, subject, version)

    def to_body(self) -> dict[str, Any]:
        """``/schemas/ids/{id}``'s answer: schemaType only when not AVRO, as Confluent's."""
        body: dict[str, Any] = {"schema": self.schema}
        if self.schema_type != "AVRO":
            body["schemaType"] = self.schema_type
        if self.references:
            body["references"] = [{"name": n, "subject": s, "version": v} for n, s, v in self.references]
        return body


@dataclass
class SchemaVersion:
    subject: str
    version: int
    id: int
    deleted: bool = False


@dataclass
class _State:
    versions: dict[str, dict[int, SchemaVersion]] = field(default_factory=dict)
    schemas: dict[int, StoredSchema] = field(default_factory=dict)
    ids: dict[StoredSchema, int] = field(default_factory=dict)
    configs: dict[str | None, str] = field(default_factory=dict)
    modes: dict[str | None, str] = field(default_factory=dict)
    next_id: int = 1


def _key(keytype: str, **fields: Any) -> bytes:
    return orjson.dumps({"keytype": keytype, **fields})


class SchemaRegistry:
    """The registry (see the module docstring). ``internal_log`` is where ``__schemas``
    lives (:class:`~laketail.coordinator.ports.CoordinatorLog`, the broker)."""

    def __init__(self, internal_log: "CoordinatorLog", replication_factor: int = 3) -> None:
        self.internal_log = internal_log
        self.replication_factor = replication_factor
        self._state = _State()
        self._lock = asyncio.Lock()
        self._topic_ready = False
        #: Records of ``__schemas`` the last :meth:`load` could not decode.
        self.skipped_records = 0

    # -- the log ---------------------------------------------------------------------------

    async def load(self) -> None:
        """Rebuild from ``__schemas``, replaying every record in offset order."""
        self._state = _State()
        self.skipped_records = 0
        if SCHEMAS_TOPIC not in self.internal_log.list_topics():
            return
        self._topic_ready = True
        async for records in self.internal_log.read_to_log_end(SCHEMAS_TOPIC, 0):
            for key, value, offset in data_records(records):
                try:
                    self.replay(key, value)
                except (ValueError, TypeError, KeyError, AttributeError) as exc:
                    self.skipped_records += 1
                    log.warning("%s offset %d: skipping a record that cannot be decoded (%r)",
                                SCHEMAS_TOPIC, offset, str(exc)[:200])

    def replay(self, key: bytes, value: bytes | None) -> None:
        """Apply one record of ``__schemas`` to the state (at load and after a write)."""
        k = orjson.loads(key)
        kind = k["keytype"]
        doc = orjson.loads(value) if value is not None else None
        st = self._state
        if kind == "SCHEMA":
            subject, version = str(k["subject"]), int(k["version"])
            if doc is None:
                gone = st.versions.get(subject, {}).pop(version, None)
                if not st.versions.get(subject, True):
                    del st.versions[subject]
                if gone is not None and not any(v.id == gone.id for vs in st.versions.values() for v in vs.values()):
                    # the id's last version: forgotten, as a reload of the compacted log forgets it
                    stored = st.schemas.pop(gone.id)
                    st.ids.pop(stored, None)
                return
            stored = StoredSchema(
                compat.schema_type(doc.get("schemaType")), str(doc["schema"]),
                tuple((str(r["name"]), str(r["subject"]), int(r["version"])) for r in doc.get("references") or ()),
            )
            schema_id = int(doc["id"])
            st.schemas[schema_id] = stored
            st.ids[stored] = schema_id
            st.next_id = max(st.next_id, schema_id + 1)
            st.versions.setdefault(subject, {})[version] = SchemaVersion(
                subject, version, schema_id, bool(doc.get("deleted")))
        elif kind == "CONFIG":
            target = k.get("subject")
            if doc is None:
                st.configs.pop(target, None)
            else:
                st.configs[target] = compat.level(doc["compatibilityLevel"])
        elif kind == "MODE":
            target = k.get("subject")
            if doc is None:
                st.modes.pop(target, None)
            else:
                st.modes[target] = _mode(doc["mode"])
        elif kind == "NEXT_ID":
            st.next_id = max(st.next_id, int(doc["next_id"])) if doc else st.next_id
        else:
            raise ValueError(f"unknown keytype {kind!r}")

    async def _append(self, records: list[tuple[bytes, bytes | None]]) -> None:
        if not self._topic_ready:
            if SCHEMAS_TOPIC not in self.internal_log.list_topics():
                await self.internal_log.create_topic(
                    SCHEMAS_TOPIC, 1, self.replication_factor,
                    {"cleanup.policy": "compact"}, internal_topics_allowed=True,
                )
            self._topic_ready = True
        batch = pa.RecordBatch.from_pydict({
            "key": pa.array([k for k, _ in records], pa.binary()),
            "value": pa.array([v for _, v in records], pa.binary()),
            "partition": pa.array([0] * len(records), pa.int32()),
        })
        await self.internal_log.produce(SCHEMAS_TOPIC, batch, acks="all", internal_topics_allowed=True)
        for k, v in records:
            self.replay(k, v)

    # -- reads -----------------------------------------------------------------------------

    def subjects(self, deleted: bool = False) -> list[str]:
        return sorted(s for s, vs in self._state.versions.items() if any(deleted or not v.deleted for v in vs.values()))

    def _versions(self, subject: str, deleted: bool = False) -> list[SchemaVersion]:
        """The subject's versions, oldest first; SUBJECT_NOT_FOUND when none is visible."""
        found = [v for _, v in sorted(self._state.versions.get(subject, {}).items()) if deleted or not v.deleted]
        if not found:
            raise SubjectNotFound.of(subject)
        return found

    def versions_of_subject(self, subject: str) -> list[SchemaVersion]:
        """Every version the subject holds, soft-deleted ones too, oldest first."""
        return [v for _, v in sorted(self._state.versions.get(subject, {}).items())]

    def versions(self, subject: str, deleted: bool = False) -> list[int]:
        return [v.version for v in self._versions(subject, deleted)]

    def version(self, subject: str, version: str, deleted: bool = False) -> SchemaVersion:
        """``version`` is a number, ``latest`` or ``-1``; INVALID_VERSION (42202) otherwise."""
        number = parse_version(version)
        visible = self._versions(subject, deleted)
        if number == -1:
            return visible[-1]
        for v in visible:
            if v.version == number:
                return v
        raise VersionNotFound.of(number)

    def schema(self, schema_id: int) -> StoredSchema:
        found = self._state.schemas.get(schema_id)
        if found is None:
            raise SchemaNotFound(f"Schema {schema_id} not found")
        return found

    def describe(self, v: SchemaVersion) -> dict[str, Any]:
        body: dict[str, Any] = {"subject": v.subject, "version": v.version, "id": v.id}
        body.update(self.schema(v.id).to_body())
        return body

    def versions_of_id(self, schema_id: int, deleted: bool = False) -> list[SchemaVersion]:
        self.schema(schema_id)
        return [v for s in sorted(self._state.versions) for _, v in sorted(self._state.versions[s].items())
                if v.id == schema_id and (deleted or not v.deleted)]

    def referenced_by(self, subject: str, version: str) -> list[int]:
        v = self.version(subject, version)
        return sorted({
            sv.id for vs in self._state.versions.values() for sv in vs.values()
            if not sv.deleted and (subject, v.version) in {(s, n) for _, s, n in self.schema(sv.id).references}
        })

    def compatibility(self, subject: str | None, default_to_global: bool = False) -> str:
        configs = self._state.configs
        if subject is not None and subject in configs:
            return configs[subject]
        if subject is not None and not default_to_global:
            raise SubjectCompatibilityNotConfigured(
                f"Subject '{subject}' does not have subject-level compatibility configured")
        return configs.get(None, compat.DEFAULT_LEVEL)

    def mode(self, subject: str | None, default_to_global: bool = False) -> str:
        modes = self._state.modes
        if subject is not None and subject in modes:
            return modes[subject]
        if subject is not None and not default_to_global:
            raise SubjectModeNotConfigured(f"Subject '{subject}' does not have subject-level mode configured")
        return modes.get(None, "READWRITE")

    # -- schemas ---------------------------------------------------------------------------

    def _candidate(self, body: Any) -> tuple[StoredSchema, compat.Parsed]:
        """The schema a request body names, parsed; INVALID_SCHEMA when it is not one."""
        if not isinstance(body, dict) or not isinstance(body.get("schema"), str) or not body["schema"].strip():
            raise InvalidSchema("Invalid schema: the body needs a non-empty string 'schema'")
        kind = compat.schema_type(body.get("schemaType"))
        refs = []
        ref_texts = []
        if not isinstance(body.get("references", []), (list, type(None))):
            raise InvalidSchema("Invalid schema: 'references' is a list of {name, subject, version}")
        for ref in body.get("references") or ():
            try:
                name, subject, version = str(ref["name"]), str(ref["subject"]), int(ref["version"])
            except (KeyError, TypeError, ValueError) as exc:
                raise InvalidSchema(f"Invalid schema: a reference needs name, subject and version ({exc})") from exc
            try:
                target = self.version(subject, str(version))
            except (SubjectNotFound, VersionNotFound) as exc:
                raise InvalidSchema(f"Invalid schema: reference {name} to {subject} version {version}: "
                                    f"{exc.message}") from exc
            refs.append((name, subject, target.version))
            ref_texts.append(self.schema(target.id).schema)
        parsed = compat.parse(kind, body["schema"], ref_texts)
        return StoredSchema(kind, parsed.canonical, tuple(refs)), parsed

    def _parsed(self, v: SchemaVersion) -> compat.Parsed:
        stored = self.schema(v.id)
        refs = [self.schema(self.version(s, str(n), deleted=True).id).schema for _, s, n in stored.references]
        return compat.parse(stored.schema_type, stored.schema, refs)

    def lookup(self, subject: str, body: Any, deleted: bool = False) -> dict[str, Any]:
        """The version of ``subject`` holding the body's schema (POST /subjects/{subject})."""
        visible = self._versions(subject, deleted)
        stored, _ = self._candidate(body)
        for v in reversed(visible):
            if self._state.schemas.get(v.id) == stored:
                return self.describe(v)
        raise SchemaNotFound("Schema not found")

    def test_compatibility(self, subject: str, body: Any, version: str | None) -> list[str]:
        """Messages why the body's schema is incompatible (version None: every version the
        level compares with); empty when compatible."""
        _, parsed = self._candidate(body)
        level = self.compatibility(subject, default_to_global=True)
        if version is None:
            try:
                earlier = self._versions(subject)
            except SubjectNotFound:
                return []
        elif parse_version(version) == -1 and subject not in self.subjects():
            return []  # "latest" of a subject with no version: compatible, as Confluent answers
        else:
            earlier = [self.version(subject, version)]
            level = level.removesuffix("_TRANSITIVE")
        return compat.check(parsed, [(v.version, self._parsed(v)) for v in earlier], level)

    async def register(self, subject: str, body: Any) -> int:
        """Register the body's schema under ``subject``; its id (an existing version's
        when the subject holds the same schema). INCOMPATIBLE_SCHEMA (409 40901) when the
        subject's compatibility level refuses it; OPERATION_NOT_PERMITTED in READONLY."""
        validate_subject(subject)
        async with self._lock:
            mode = self.mode(subject, default_to_global=True)
            if mode.startswith("READONLY"):
                raise OperationNotPermitted(f"Subject {subject} is in read-only mode")
            stored, parsed = self._candidate(body)
            all_versions = self._state.versions.get(subject, {})
            live = [v for _, v in sorted(all_versions.items()) if not v.deleted]
            for v in live:
                if self._state.schemas.get(v.id) == stored:
                    return v.id
            wanted_id = body.get("id")
            if mode == "IMPORT":
                if type(wanted_id) is not int or wanted_id < 1:
                    raise InvalidSchema("Invalid schema: IMPORT mode needs the schema's 'id'")
                taken = self._state.schemas.get(wanted_id)
                if taken is not None and taken != stored:
                    raise OperationNotPermitted(f"Overwrite new schema with id {wanted_id} is not permitted.")
                schema_id = wanted_id
                version = body.get("version") or max(all_versions, default=0) + 1
                if type(version) is not int or not 1 <= version <= MAX_VERSION:
                    raise InvalidVersion(f"The specified version '{version}' is not a valid version id.")
            else:
                if wanted_id is not None and self._state.ids.get(stored) != wanted_id:
                    raise OperationNotPermitted("Setting a schema id is permitted in IMPORT mode only")
                problems = compat.check(parsed, [(v.version, self._parsed(v)) for v in live],
                                        self.compatibility(subject, default_to_global=True))
                if problems:
                    raise IncompatibleSchema(
                        f"Schema being registered is incompatible with an earlier schema for subject "
                        f"\"{subject}\", details: [{', '.join(problems)}]")
                schema_id = self._state.ids.get(stored, 0)
                version = max(all_versions, default=0) + 1
            records: list[tuple[bytes, bytes | None]] = [(
                _key("SCHEMA", subject=subject, version=version),
                orjson.dumps({
                    "subject": subject, "version": version, "id": schema_id or self._state.next_id,
                    "schemaType": stored.schema_type, "schema": stored.schema, "deleted": False,
                    "references": [{"name": n, "subject": s, "version": v} for n, s, v in stored.references],
                }),
            )]
            if not schema_id:
                schema_id = self._state.next_id
                records.append((_key("NEXT_ID"), orjson.dumps({"next_id": schema_id + 1})))
            elif schema_id >= self._state.next_id:
                records.append((_key("NEXT_ID"), orjson.dumps({"next_id": schema_id + 1})))
            await self._append(records)
            return schema_id

    # -- deletes ---------------------------------------------------------------------------

    def _check_unreferenced(self, subject: str, versions: list[int]) -> None:
        for vs in self._state.versions.values():
            for sv in vs.values():
                if sv.deleted:
                    continue
                for _, s, n in self.schema(sv.id).references:
                    if s == subject and n in versions:
                        raise ReferenceExists(
                            f"One or more references exist to the schema {{subject={subject},version={n}}}.")

    def _tombstone_or_mark(self, v: SchemaVersion, permanent: bool) -> tuple[bytes, bytes | None]:
        key = _key("SCHEMA", subject=v.subject, version=v.version)
        if permanent:
            return key, None
        stored = self.schema(v.id)
        return key, orjson.dumps({
            "subject": v.subject, "version": v.version, "id": v.id, "schemaType": stored.schema_type,
            "schema": stored.schema, "deleted": True,
            "references": [{"name": n, "subject": s, "version": x} for n, s, x in stored.references],
        })

    async def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        async with self._lock:
            if self.mode(subject, default_to_global=True).startswith("READONLY"):
                raise OperationNotPermitted(f"Subject {subject} is in read-only mode")
            every = [v for _, v in sorted(self._state.versions.get(subject, {}).items())]
            if not every:
                raise SubjectNotFound.of(subject)
            live = [v for v in every if not v.deleted]
            if permanent:
                if live:
                    raise SubjectNotSoftDeleted(
                        f"Subject '{subject}' was not deleted first before being permanently deleted")
                targets = every
            else:
                if not live:
                    raise SubjectSoftDeleted(
                        f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently")
                targets = live
            self._check_unreferenced(subject, [v.version for v in targets])
            records = [self._tombstone_or_mark(v, permanent) for v in targets]
            if permanent:
                if subject in self._state.configs:
                    records.append((_key("CONFIG", subject=subject), None))
                if subject in self._state.modes:
                    records.append((_key("MODE", subject=subject), None))
            await self._append(records)
            return [v.version for v in targets]

    async def delete_version(self, subject: str, version: str, permanent: bool = False) -> int:
        async with self._lock:
            if self.mode(subject, default_to_global=True).startswith("READONLY"):
                raise OperationNotPermitted(f"Subject {subject} is in read-only mode")
            number = parse_version(version)
            v = self.version(subject, version, deleted=number != -1)
            if v.deleted and not permanent:
                raise VersionSoftDeleted(f"Subject '{subject}' Version {v.version} was soft deleted."
                                         "Set permanent=true to delete permanently")
            if permanent and not v.deleted:
                raise VersionNotSoftDeleted(f"Subject '{subject}' Version {v.version} was not deleted "
                                            "first before being permanently deleted")
            self._check_unreferenced(subject, [v.version])
            await self._append([self._tombstone_or_mark(v, permanent)])
            return v.version

    # -- config and mode -------------------------------------------------------------------

    async def set_compatibility(self, subject: str | None, value: object) -> str:
        level = compat.level(value)
        if subject is not None:
            validate_subject(subject)
        async with self._lock:
            await self._append([(_key("CONFIG", subject=subject), orjson.dumps({"compatibilityLevel": level}))])
        return level

    async def delete_compatibility(self, subject: str | None) -> str:
        async with self._lock:
            previous = self.compatibility(subject)
            if subject is None and None not in self._state.configs:
                return previous
            await self._append([(_key("CONFIG", subject=subject), None)])
            return previous

    async def set_mode(self, subject: str | None, value: object, force: bool = False) -> str:
        mode = _mode(value)
        if subject is not None:
            validate_subject(subject)
        async with self._lock:
            if mode == "IMPORT" and not force:
                live = self.subjects()
                if live if subject is None else subject in live:
                    raise OperationNotPermitted("Cannot import since found existing subjects")
            await self._append([(_key("MODE", subject=subject), orjson.dumps({"mode": mode}))])
        return mode

    async def delete_mode(self, subject: str) -> str:
        async with self._lock:
            previous = self.mode(subject)
            await self._append([(_key("MODE", subject=subject), None)])
            return previous


def _mode(value: object) -> str:
    if not isinstance(value, str) or value.upper() not in MODES:
        raise InvalidMode(f"Invalid mode. Valid values are READWRITE, READONLY, READONLY_OVERRIDE, IMPORT; "
                          f"got {value!r}")
    return value.upper()


def parse_version(text: str) -> int:
    """A version path segment: ``latest`` and ``-1`` are -1 (the latest), else 1..2^31-1."""
    if text == "latest":
        return -1
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number == -1 or 1 <= number <= MAX_VERSION:
        return number
    raise InvalidVersion(f"The specified version '{text}' is not a valid version id. Allowed values are "
                         f"between [1, 2^31-1] and the string \"latest\"")


def validate_subject(subject: str) -> None:
    from laketail.schemas.errors import InvalidSubject

    if not subject or not subject.isprintable() or len(subject) > 255:
        raise InvalidSubject(f"The specified subject '{subject[:300]}' is not a valid subject name.")
