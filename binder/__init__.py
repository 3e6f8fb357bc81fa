"""binder component (see docs/architecture.md)."""
