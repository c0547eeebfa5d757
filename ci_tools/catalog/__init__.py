"""The chips: the catalog (``matrix/socs.yaml``) and its resolver, what a compile route can target, and the
README's chip table generated from it."""
