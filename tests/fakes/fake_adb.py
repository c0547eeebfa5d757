"""A fake ``adb`` standing in for the Android Debug Bridge and a phone on it (no phone exists here).

``make_fake_adb(folder, phones)`` writes an executable ``adb`` and a ``phones.json`` beside it; each phone has a
serial, a state and its properties, and a folder standing in for its file system. The commands the adb route
uses behave as AOSP's ``packages/modules/adb/docs/user/adb.1.md`` documents them:

- ``adb devices``: "List of devices attached", then ``SERIAL<TAB>STATE`` per phone (``device``, ``unauthorized``,
  ``offline``) [adb.1.md, "devices [-l]"].
- ``-s SERIAL`` picks a phone and overrides ``$ANDROID_SERIAL``; without either, a command that needs a phone
  fails with "more than one device/emulator" when several are attached, "no devices/emulators found" when none
  [adb.1.md, "-s SERIAL"; the messages are adb's own].
- ``adb shell COMMAND``: runs it on the phone and exits with its exit status (shell protocol v2, adb 1.0.35 /
  Android 7; ``-x`` would disable it) [adb.1.md, "shell [-e ESCAPE] [-n] [-Tt] [-x] [COMMAND...]"]. Here it runs
  with ``sh -c`` on this machine, the phone's ``/data/local/tmp`` being a folder of the fake; ``getprop NAME``
  answers the phone's property (empty when unset, as Android's getprop).
- ``adb push LOCAL... REMOTE``: copies files to the phone; into ``REMOTE`` when it ends with ``/`` or is a
  folder [adb.1.md, "push [--sync] [-z ALGORITHM] [-Z] LOCAL... REMOTE"].
- ``adb pull REMOTE LOCAL``: copies a file or a folder back; a folder goes into ``LOCAL/<name>`` when ``LOCAL``
  exists, else becomes ``LOCAL`` [adb.1.md, "pull [-a] [-z ALGORITHM] [-Z] REMOTE... LOCAL"].
- A phone whose state is not ``device`` refuses every command ("device unauthorized", "device offline").
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

SCRIPT = r'''
import json, os, shutil, subprocess, sys
from pathlib import Path

HERE = Path(sys.argv[0]).resolve().parent
PHONES = json.loads((HERE / "phones.json").read_text())
args = sys.argv[1:]


def die(msg, code=1):
    print(f"adb: error: {msg}", file=sys.stderr)
    sys.exit(code)


serial = os.environ.get("ANDROID_SERIAL")
if args[:1] == ["-s"]:
    serial, args = args[1], args[2:]
if not args:
    die("no command")
if args[0] == "devices":
    print("List of devices attached")
    for s, p in PHONES.items():
        print(f"{s}\t{p['state']}")
    sys.exit(0)
if serial is None:
    if len(PHONES) > 1:
        die("more than one device/emulator")
    if not PHONES:
        die("no devices/emulators found")
    serial = next(iter(PHONES))
if serial not in PHONES:
    die(f"device '{serial}' not found")
phone = PHONES[serial]
if phone["state"] != "device":
    die(f"device {phone['state']}")
root = Path(phone["root"])


def local(remote):  # the phone's path in the fake's folder
    return root / remote.lstrip("/")


cmd = args[0]
if cmd == "shell":
    line = " ".join(args[1:])
    if args[1:2] == ["getprop"]:
        print(phone["props"].get(args[2], ""))
        sys.exit(0)
    line = line.replace("/data/local/tmp", str(root / "data/local/tmp"))
    r = subprocess.run(["sh", "-c", line], cwd=root)
    sys.exit(r.returncode)
if cmd == "push":
    *sources, dest = args[1:]
    target = local(dest)
    into = dest.endswith("/") or target.is_dir()
    if into:
        target.mkdir(parents=True, exist_ok=True)
    for src in sources:
        if not Path(src).exists():
            die(f"cannot stat '{src}': No such file or directory")
        shutil.copy2(src, target / Path(src).name if into else target)
    print(f"{len(sources)} file(s) pushed")
    sys.exit(0)
if cmd == "pull":
    src, dest = local(args[1]), Path(args[2])
    if not src.exists():
        die(f"remote object '{args[1]}' does not exist")
    if src.is_dir():
        shutil.copytree(src, dest / src.name if dest.is_dir() else dest)
    else:
        shutil.copy2(src, dest / src.name if dest.is_dir() else dest)
    print("1 file(s) pulled")
    sys.exit(0)
die(f"unknown command {cmd}")
'''


def make_fake_adb(folder: Path, phones: dict[str, dict]) -> Path:
    """``phones``: serial -> {"props": {"ro.soc.model": "SM8750", ...}, "state": "device"}; returns the ``adb``."""
    folder.mkdir(parents=True, exist_ok=True)
    table = {}
    for serial, p in phones.items():
        root = folder / "phones" / serial
        (root / "data" / "local" / "tmp").mkdir(parents=True, exist_ok=True)
        table[serial] = {"props": p.get("props", {}), "state": p.get("state", "device"), "root": str(root)}
    (folder / "phones.json").write_text(json.dumps(table))
    adb = folder / "adb"
    adb.write_text(f"#!{sys.executable}\n" + SCRIPT)
    adb.chmod(adb.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return adb
