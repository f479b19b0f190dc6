"""What a sweep asks for: the typed Hydra configs, a cell, and what a builder must be."""
