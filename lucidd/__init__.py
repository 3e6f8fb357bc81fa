"""lucidd: the Lucid GPU-cluster scheduler for Slurm, with its trace-driven simulator."""

__version__ = "0.1.0"
