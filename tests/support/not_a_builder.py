"""A module whose `build` is not callable (bad-input tests)."""

build = 3
