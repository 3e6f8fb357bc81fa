"""profiler component (see docs/architecture.md)."""
