import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("LUCIDD_SHARED", REPO.parent / "shared"))
VENUS_DIR = SHARED / "traces" / "helios_venus_sept2020_lucid"
PHILLY = SHARED / "traces" / "philly_sia_completed" / "philly.csv"
ARTIFACT = SHARED / "lucid-artifact"


@pytest.fixture
def shared_dir():
    if not VENUS_DIR.is_dir():
        pytest.skip(f"../shared not found at {SHARED}: traces and Lucid artifact data are read from there, never copied")
    return SHARED
