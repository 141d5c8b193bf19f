"""Headless Chromium for the report and site tests: the DOM after rendering and what it fetched."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
INTERNAL = ("google.com", "googleapis.com", "gstatic.com", "gvt1.com")  # Chromium's own services


def flags(tmp: Path) -> list[str]:
    """A quiet, offline-minded headless Chromium."""
    return [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp / 'profile'}",
    ]


def dump_dom(page: Path, tmp: Path) -> tuple[str, set[str]]:
    """(DOM after load, URLs fetched other than file:, data: and Chromium's own services)."""
    net = tmp / "net.json"
    dom = subprocess.run(
        [*flags(tmp), f"--log-net-log={net}", "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    ).stdout
    urls = set()
    for ev in json.loads(net.read_text()).get("events", []):
        u = (ev.get("params") or {}).get("url")
        if u:
            urls.add(u)
    return dom, {u for u in urls if not u.startswith(("file:", "data:")) and not any(h in u for h in INTERNAL)}


def screenshot(page: Path, tmp: Path, shot: Path) -> None:
    """A 1280-wide screenshot of the page."""
    shot.parent.mkdir(exist_ok=True)
    subprocess.run(
        [*flags(tmp), "--window-size=1280,1000", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        timeout=120,
    )
