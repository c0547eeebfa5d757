"""``qnn-release image``: the SDK image's immutable reference, and the pins it is built from.

The tag is ``<QAIRT version>-<12 hex>``, the hex a digest of everything that goes into the
image (the Dockerfile, the files it copies and the SDK pins), so a tag never names two different images and a
release pulls exactly what its image job checked or built. The SDK is never built into an
image before it is pinned: a matrix whose SDK ``revision`` or ``sha256`` is null is refused.
Docker refuses capitals in image names: the owner is lower-cased.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..matrix.schema import LoadedMatrix, QairtSdk
from ..paths import DATA, PACKAGE

DOCKERFILE = "Dockerfile-2.40"
# what the Dockerfile copies into the image besides the pins: part of the tag's digest
IMAGE_INPUTS = ("ci_tools/qairt_zip.py",)
OWNER_EXPR = "${{ github.repository_owner }}"


@dataclass(frozen=True)
class Image:
    name: str  # ghcr.io/owner/qnn-sdk
    tag: str  # 2.40.0.251030-0123456789ab
    sdk: QairtSdk

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.tag}"

    def outputs(self) -> list[str]:
        """``key=value`` lines for ``$GITHUB_OUTPUT``."""
        return [f"ref={self.ref}", f"name={self.name}", f"tag={self.tag}", f"version={self.sdk.version}",
                f"hf_repo={self.sdk.hf_repo}", f"file={self.sdk.file}", f"revision={self.sdk.revision}",
                f"sha256={self.sdk.sha256}"]


def pinned_sdk(loaded: LoadedMatrix) -> QairtSdk:
    sdk = loaded.matrix.sdk.qairt[0]
    missing = [k for k in ("revision", "sha256") if getattr(sdk, k) is None]
    if missing:
        raise ConfigError(f"{loaded.path}: sdk.qairt[0] ({sdk.version}) has no {' and no '.join(missing)} pin: "
                          f"an image would trust whatever {sdk.hf_repo} serves today",
                          hint=f"run `qnn-release sdk fetch --version {sdk.version} --dest /tmp/qairt --record` "
                               "once and commit the matrix")
    return sdk


def image(loaded: LoadedMatrix, owner: str, dockerfile: Path | None = None) -> Image:
    sdk = pinned_sdk(loaded)
    # the recipe is the tool's (its checkout: this repository, or an adopter's pinned .qnn-release-tool), never the
    # adopting repository's, which has no Dockerfile of its own
    dockerfile = dockerfile or DATA / DOCKERFILE
    try:  # the files it copies are the tool's own (ci_tools/...), wherever the tool is installed
        recipe = dockerfile.read_bytes() + b"".join((PACKAGE.parent / f).read_bytes() for f in IMAGE_INPUTS
                                                    if (PACKAGE.parent / f).is_file())
    except OSError as e:
        raise ConfigError(f"{dockerfile}: cannot read the image recipe: {e.strerror}") from None
    if not re.fullmatch(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})", owner or ""):
        raise ConfigError(f"--owner {owner!r}: expected a GitHub user or organisation name")
    name = loaded.matrix.release.image.replace(OWNER_EXPR, owner).lower()
    if "${{" in name:
        raise ConfigError(f"{loaded.path}: release.image {loaded.matrix.release.image!r}: only "
                          f"{OWNER_EXPR} may be an expression", hint="write the registry path literally")
    pins = json.dumps(sdk.model_dump(mode="json"), sort_keys=True).encode()
    digest = hashlib.sha256(hashlib.sha256(recipe).digest() + pins).hexdigest()[:12]
    return Image(name=name, tag=f"{sdk.version}-{digest}", sdk=sdk)
