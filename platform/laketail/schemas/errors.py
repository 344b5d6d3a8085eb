"""The Schema Registry's errors: Confluent Schema Registry's status and ``error_code``.

Each is a :class:`~laketail.errors.LaketailError` (one error root, one handler turns it
into ``{"error_code", "message"}``), numbered as Confluent's
``io.confluent.kafka.schemaregistry.rest.exceptions.Errors`` numbers them. They are not
Kafka protocol errors, so ``kafka_code`` stays -1 and ``kafka_name`` is the registry's
own name (it labels ``/metrics``). The message is Confluent's text alone, without the
``NAME:`` prefix other laketail errors carry: registry clients show it to users as is.
"""

from __future__ import annotations

from laketail.errors import InvalidRecord, LaketailError


class SchemaRegistryError(LaketailError):
    """Root of the registry's errors (a store failure: 500 50001, as Confluent's)."""

    kafka_name = "SCHEMA_REGISTRY_STORE_ERROR"

    @property
    def message(self) -> str:
        return self.detail or self.kafka_name


class SubjectNotFound(SchemaRegistryError):
    kafka_name = "SUBJECT_NOT_FOUND"
    http_status = 404
    rest_code = 40401

    @classmethod
    def of(cls, subject: str) -> "SubjectNotFound":
        return cls(f"Subject '{subject}' not found.")


class VersionNotFound(SchemaRegistryError):
    kafka_name = "VERSION_NOT_FOUND"
    http_status = 404
    rest_code = 40402

    @classmethod
    def of(cls, version: object) -> "VersionNotFound":
        return cls(f"Version {version} not found.")


class SchemaNotFound(SchemaRegistryError):
    kafka_name = "SCHEMA_NOT_FOUND"
    http_status = 404
    rest_code = 40403


class SubjectSoftDeleted(SchemaRegistryError):
    kafka_name = "SUBJECT_SOFT_DELETED"
    http_status = 404
    rest_code = 40404


class SubjectNotSoftDeleted(SchemaRegistryError):
    kafka_name = "SUBJECT_NOT_SOFT_DELETED"
    http_status = 404
    rest_code = 40405


class VersionSoftDeleted(SchemaRegistryError):
    kafka_name = "SCHEMA_VERSION_SOFT_DELETED"
    http_status = 404
    rest_code = 40406


class VersionNotSoftDeleted(SchemaRegistryError):
    kafka_name = "SCHEMA_VERSION_NOT_SOFT_DELETED"
    http_status = 404
    rest_code = 40407


class SubjectCompatibilityNotConfigured(SchemaRegistryError):
    kafka_name = "SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED"
    http_status = 404
    rest_code = 40408


class SubjectModeNotConfigured(SchemaRegistryError):
    kafka_name = "SUBJECT_LEVEL_MODE_NOT_CONFIGURED"
    http_status = 404
    rest_code = 40409


class IncompatibleSchema(SchemaRegistryError):
    kafka_name = "INCOMPATIBLE_SCHEMA"
    http_status = 409
    rest_code = 40901


class InvalidSchema(SchemaRegistryError):
    kafka_name = "INVALID_SCHEMA"
    http_status = 422
    rest_code = 42201


class InvalidVersion(SchemaRegistryError):
    kafka_name = "INVALID_VERSION"
    http_status = 422
    rest_code = 42202


class InvalidCompatibilityLevel(SchemaRegistryError):
    kafka_name = "INVALID_COMPATIBILITY_LEVEL"
    http_status = 422
    rest_code = 42203


class InvalidMode(SchemaRegistryError):
    kafka_name = "INVALID_MODE"
    http_status = 422
    rest_code = 42204


class OperationNotPermitted(SchemaRegistryError):
    kafka_name = "OPERATION_NOT_PERMITTED"
    http_status = 422
    rest_code = 42205


class ReferenceExists(SchemaRegistryError):
    kafka_name = "REFERENCE_EXISTS"
    http_status = 422
    rest_code = 42206


class InvalidSubject(SchemaRegistryError):
    kafka_name = "INVALID_SUBJECT"
    http_status = 422
    rest_code = 42208


class SubjectAuthorizationFailed(LaketailError):
    """Denied an operation on a ``Subject`` ACL resource (403 40301, and the message
    prefix, as every other denial)."""

    kafka_name = "SUBJECT_AUTHORIZATION_FAILED"
    http_status = 403
    rest_code = 40301


# -- the REST Proxy's embedded schema formats (kafka-rest's ``Errors``) --------------------

class KeySchemaMissing(LaketailError):
    """A record with a key, and no ``key_schema`` nor ``key_schema_id`` (kafka-rest 42201)."""

    kafka_name = "KEY_SCHEMA_MISSING"
    http_status = 422
    rest_code = 42201


class ValueSchemaMissing(LaketailError):
    """A record with a value, and no ``value_schema`` nor ``value_schema_id`` (42202)."""

    kafka_name = "VALUE_SCHEMA_MISSING"
    http_status = 422
    rest_code = 42202


class JsonConversion(InvalidRecord):
    """A record's JSON that its schema does not take (kafka-rest's JSON_CONVERSION, 42203);
    Kafka's INVALID_RECORD."""

    kafka_name = "JSON_CONVERSION"
    http_status = 422
    rest_code = 42203

    @property
    def message(self) -> str:
        return "Conversion of JSON to Object failed: " + self.detail


class InvalidEmbeddedSchema(LaketailError):
    """A ``key_schema``/``value_schema`` (or v3 ``schema``) that is not a schema of the
    format (kafka-rest's INVALID_SCHEMA, 42205; the registry's own is 42201)."""

    kafka_name = "INVALID_EMBEDDED_SCHEMA"
    http_status = 422
    rest_code = 42205

    @property
    def message(self) -> str:
        return "Invalid schema: " + self.detail


class SchemaSerialization(LaketailError):
    """The registry refused or did not find a schema a produce names -- an unknown
    ``value_schema_id``, a schema incompatible with the subject's (kafka-rest's
    SERIALIZATION_EXCEPTION, 42207, with the registry's error in the message)."""

    kafka_name = "SERIALIZATION_EXCEPTION"
    http_status = 422
    rest_code = 42207

    @property
    def message(self) -> str:
        return "Error serializing message. " + self.detail
