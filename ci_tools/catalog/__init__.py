"""The chips: the catalog (``matrix/socs.yaml``) and its resolver, what a compile route can target, and the
the chip table of docs/chips.md generated from it."""
