"""models component (see docs/architecture.md)."""
