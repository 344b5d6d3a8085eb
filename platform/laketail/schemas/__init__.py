"""Confluent Schema Registry on the broker: state in ``__schemas``, compatibility rules.

:mod:`~laketail.schemas.registry` keeps the state, :mod:`~laketail.schemas.compatibility`
and the per-type modules (:mod:`~laketail.schemas.avro`, :mod:`~laketail.schemas.json_schema`,
:mod:`~laketail.schemas.protobuf`) decide what a registration may do;
``api/routes/schema_registry.py`` serves Confluent's REST API over them.
"""

from laketail.schemas.registry import SCHEMAS_TOPIC, SchemaRegistry

__all__ = ["SCHEMAS_TOPIC", "SchemaRegistry"]
