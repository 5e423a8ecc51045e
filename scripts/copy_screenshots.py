"""Copy the browser test's screenshots into docs/screenshots/ for the README, scaled down and optimized.

The browser test writes full-size PNGs to tests/artifacts/ (git-ignored) on every `make test`; the README
shows the committed copies this script makes (`make screenshots` runs the browser test, then this).
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

from PIL import Image
from store_notebook_outputs import optimize_png  # the same 256-colour palette as the notebooks' figures

from engines.storage import write_bytes_atomic

ROOT = Path(__file__).resolve().parents[1]
SOURCE, TARGET = ROOT / "tests" / "artifacts", ROOT / "docs" / "screenshots"
WIDTH = 1000  # readable on GitHub, a fraction of the full-size bytes


def main() -> int:
    shots = sorted(SOURCE.glob("*.png"))
    if not shots:
        print(f"no screenshots in {SOURCE}: run the browser test first (make screenshots)", file=sys.stderr)
        return 1
    TARGET.mkdir(parents=True, exist_ok=True)
    for shot in shots:
        image = Image.open(shot).convert("RGB")
        if image.width > WIDTH:
            image = image.resize((WIDTH, round(image.height * WIDTH / image.width)), Image.LANCZOS)
        png = io.BytesIO()
        image.save(png, format="png")
        out = TARGET / shot.name
        write_bytes_atomic(out, optimize_png(png.getvalue()))
        print(f"{out.relative_to(ROOT)}: {out.stat().st_size / 1024:.0f} kB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
