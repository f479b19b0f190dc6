"""A builder module that fails at import, and one attribute that is not a builder (bad-input tests)."""

raise ZeroDivisionError("the builder's module divided by zero at import (injected)")
