"""Partial downloads in a cache that other runs share (`<cache>/downloads`)."""

from __future__ import annotations


def test_a_download_survives_another_run_removing_the_shared_downloads_folder(tmp_path):
    """Two fetches sharing a cache: one's `discard` removes the downloads folder while empty, after the other
    made it and before it opened its partial file (a race seen between two parallel tests)."""
    import contextlib

    from ci_tools.sources import download

    part = tmp_path / "cache" / "downloads" / "x.part"

    class Response:
        status_code, raw = 200, None  # no raw.read1: the body through iter_content

        def __init__(self):
            self.headers = {}

        def iter_content(self, chunk_size):
            yield b"payload"

    @contextlib.contextmanager
    def open_from(have):
        part.parent.rmdir()  # the other run's discard, between mkdir and open
        yield Response()

    download.resume(part, open_from, download.Download(what="x", sleep=lambda s: None))
    assert part.read_bytes() == b"payload"
