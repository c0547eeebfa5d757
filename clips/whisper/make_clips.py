"""Generate the speech clips listed in clips.yaml with espeak-ng and sox (16 kHz, mono, 16-bit PCM).

Usage: python clips/whisper/make_clips.py   (needs `apt-get install espeak-ng sox`)
The WAVs are committed: builds and tests never run this.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent


def main() -> int:
    missing = [t for t in ("espeak-ng", "sox") if shutil.which(t) is None]
    if missing:
        print(f"make_clips: {', '.join(missing)} not found (hint: apt-get install espeak-ng sox)", file=sys.stderr)
        return 2
    for clip in yaml.safe_load((HERE / "clips.yaml").read_text())["clips"]:
        with tempfile.TemporaryDirectory() as tmp:
            raw = Path(tmp) / "raw.wav"
            subprocess.run(["espeak-ng", "-v", clip["voice"], "-s", str(clip["speed"]), "-w", str(raw),
                            clip["text"]], check=True)
            out = Path(tmp) / "out.wav"
            # 16 kHz mono 16-bit, 0.3 s of silence either side (a clip that starts on the first phoneme
            # is harder than real recordings), no dither so the output is reproducible
            subprocess.run(["sox", "-D", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(out),
                            "pad", "0.3", "0.3"], check=True)
            shutil.move(out, HERE / clip["file"])
        print(f"wrote {clip['file']}: {clip['text']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
