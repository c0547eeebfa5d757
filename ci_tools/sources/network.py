"""Connection-level failures, whatever library raised them, as one line (sources, the SDK's updates)."""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Iterator

import requests
import urllib3

from ..errors import QnnReleaseError
from ..util.text import clip


@functools.cache
def network_errors() -> tuple[type[BaseException], ...]:
    """Connection-level failures: requests' (urllib3's, read raw), and httpx's (huggingface_hub 1.x, httpx2 in 2.x).

    Looked up when a failure happens, so a GitHub-only command never imports httpx.
    """
    errors: list[type[BaseException]] = [requests.RequestException, urllib3.exceptions.HTTPError]
    for module in ("httpx2", "httpx"):
        try:
            errors.append(importlib.import_module(module).HTTPError)
        except (ImportError, AttributeError):
            continue
    return tuple(errors)


@contextlib.contextmanager
def unreachable_as(error: type[QnnReleaseError], what: str, hint: str | None = None) -> Iterator[None]:
    """A host that does not answer, whatever the library raises (requests, urllib3, httpx or httpx2 in
    huggingface_hub 2.x), becomes one line of ``error`` naming ``what``; the library's own retry chatter
    (huggingface_hub logs a line per retry) stays off the terminal meanwhile."""
    import logging

    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.ERROR)
    try:
        yield
    except QnnReleaseError:
        raise
    except network_errors() as e:
        first = clip(str(e), 200) or type(e).__name__
        raise error(f"{what}: unreachable ({type(e).__name__}: {first})",
                    hint=hint or "check the network, or the endpoint (HF_ENDPOINT, QNN_RELEASE_PYPI_URL, "
                                 "GITHUB_API_URL, PIP_INDEX_URL)") from None
    finally:
        hub_log.setLevel(level)
