"""Spreading cells over machines: SLURM job arrays and Ray tasks, each answering its own config problems."""
