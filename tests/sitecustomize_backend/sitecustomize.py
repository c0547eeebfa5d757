"""Imported by every Python process of an interrupt test (PYTHONPATH), build workers included (they are
spawned, so a patch made in the parent would not reach them): registers the test's interrupting route."""

from ci_tools.compile import backends

backends.BACKENDS["interrupting"] = "tests.support.interrupting_backend:InterruptingBackend"
