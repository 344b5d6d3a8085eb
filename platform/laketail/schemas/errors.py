"""The Schema Registry's errors: Confluent Schema Registry's status and ``error_code``.

Each is a :class:`~laketail.errors.LaketailError` (one error root, one handler turns it
into ``{"error_code", "message"}``), numbered as Confluent's
``io.confluent.kafka.schemaregistry.rest.exceptions.Errors`` numbers them. They are not
Kafka protocol errors, so ``kafka_code`` stays -1 and ``kafka_name`` is the registry's
own name (it labels ``/metrics``). The message is Confluent's text alone, without the
``NAME:`` prefix other laketail errors carry: registry clients show it to users as is.
"""

from __future__ import annotations

from laketail.errors import LaketailError


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
