"""Where cells run: the GPUs NVML sees, the host, and what a run records about them."""
