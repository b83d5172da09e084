"""OpenTelemetry traces in: OTLP/HTTP decoded and mapped to the framework's events (wire.py), stored
through ingestion (services.py), answered as exporters expect (views.py)."""
