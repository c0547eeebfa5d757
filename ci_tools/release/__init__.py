"""What a release is made of and how it travels: archives, ``metadata.json``, ``manifest.json``, qnn-libs,
release notes and the release page; publishing to GitHub (and a Hugging Face mirror) and fetching back."""
