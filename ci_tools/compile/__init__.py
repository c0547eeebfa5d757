"""One graph for one chip: the compile routes (``backends/``), the QNN EP and its logs, the doctor that names
what HTP rejects, verification on the HTP emulator, and the target job that writes one finished target."""
