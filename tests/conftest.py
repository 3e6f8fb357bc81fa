import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("LUCIDD_SHARED", REPO.parent / "shared"))
VENUS_DIR = SHARED / "traces" / "helios_venus_sept2020_lucid"
PHILLY = SHARED / "traces" / "philly_sia_completed" / "philly.csv"
ARTIFACT = SHARED / "lucid-artifact"

