"""What tests/test_socs.py and tests/unit/test_socs.py share."""

import re

import yaml

from ci_tools.paths import REPO_ROOT

RESEARCH = yaml.safe_load((REPO_ROOT / "tests" / "data" / "research_chips.yaml").read_text())["chips"]


BUILT = [r for r in RESEARCH if r.get("soc_model") is not None and r.get("htp") is not None]


def _research_spellings(row):
    names = [row["name"], row["name"].lower()]
    for a in row.get("aliases", []):
        m = re.fullmatch(r"soc_id (\d+)", a)
        names.append(f"soc_id:{m.group(1)}" if m else a)
    return names
