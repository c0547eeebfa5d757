"""``qnn-release build``: the matrix's targets through prepare, compile and verify, cached by key, with the
build report and the progress of a run."""
