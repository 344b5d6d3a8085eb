"""FastAPI's own OpenTelemetry instrumentation is off unless the process asks for it."""

import inspect

import pytest
from fastapi import FastAPI

from laketail.api.app import fastapi_telemetry

HAS_TELEMETRY = "telemetry" in inspect.signature(FastAPI.__init__).parameters


@pytest.mark.skipif(not HAS_TELEMETRY, reason="this FastAPI has no native telemetry to turn off")
def test_fastapi_telemetry_is_off_by_default_and_on_with_fastapis_switch(monkeypatch):
    monkeypatch.delenv("FASTAPI_OTEL_AUTO_CONFIGURE", raising=False)
    off = fastapi_telemetry()
    assert off == {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    assert not FastAPI(**off)._native_telemetry.enabled()
    monkeypatch.setenv("FASTAPI_OTEL_AUTO_CONFIGURE", "TRUE")
    assert fastapi_telemetry() == {}
