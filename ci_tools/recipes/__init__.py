"""Model recipes: turn a checkpoint into graphs a matrix's ``export`` command names.

A recipe depends on the stages below it (``sources``, ``prepare``, ``errors``), never on
``build`` or ``cli``; those call into it.
"""
