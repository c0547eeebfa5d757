"""GitHub's release limits, written once (package's layout, publish and the matrix schema read them here)."""

MAX_ASSETS = 1000  # assets per release (community discussion #165616; projects that reach it continue in a second)
MAX_ASSET_BYTES = 2 * 1024**3 - 1  # each file under 2 GiB (GitHub docs, "About releases")
# what a tag's release holds besides the archives: published beside them when package wrote them, with their type
EXTRAS = (("RELEASE_NOTES.md", "text/markdown"), ("qnn-fetch.sh", "text/x-shellscript"), ("index.html", "text/html"))
LAST = ("SHA256SUMS", "manifest.json")  # what download clients read: uploaded only once everything else is there
RESERVED = len(EXTRAS) + len(LAST)  # the tag's release's slots that are not archives
