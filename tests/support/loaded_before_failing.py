"""Imported by tests/support/needs_cuda_at_import.py before its import fails in the fork server."""
