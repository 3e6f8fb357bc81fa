"""orchestrator component (see docs/architecture.md)."""
