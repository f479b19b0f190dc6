"""Importing this module imports every family's diffusers class (diffusers loads them lazily).

The sweep's fork server preloads it, so a cell's child process inherits the classes instead of
importing its model module again.
"""

from .registry import all_families


def import_classes() -> None:
    for family in all_families().values():
        if family.unsupported is None:
            family.model_class()


import_classes()
