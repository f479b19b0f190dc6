"""Running cells: the Hydra job, the checks before any cell, each cell's isolated child and what it runs."""
