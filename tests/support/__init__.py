"""Helpers shared by the end-to-end tier (tests/) and the unit tier (tests/unit/): models, fixtures, stand-ins
and constants, so that no test module imports another."""
