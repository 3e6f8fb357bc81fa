"""The live daemon: config, state, reconcile loop, fail-open, systemd notify (no Lucid imports)."""
