"""Byte units, defined once."""

MIB = 2**20
GIB = 2**30
