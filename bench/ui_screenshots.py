"""Screenshots of MLflow's UI as a new user meets it: a store of a few ``--preset quick`` runs and a 2-trial sweep,
``raysim ui`` over it, and headless Chromium (Debian's ``chromium`` driven through playwright's Python package:
``apt-get install -y chromium && pip install playwright``, no browser download) on the URL ``raysim ui`` prints (the
runs table, with the sweep's run expanded), the chart view and the compare view of the loose runs.

    python bench/ui_screenshots.py --out /tmp/ui                  # ~10 minutes on 2 cores, most of it the runs
    python bench/ui_screenshots.py --out /tmp/ui --no-sweep       # the runs only
    python bench/ui_screenshots.py --out /tmp/ui --keep           # keep the store; a second call reuses its runs

Writes ``runs_table.png``, ``chart_view.png`` (the summary section), ``chart_view_curves.png`` (the summary folded,
the per-round curves) and ``compare_view.png`` under ``--out`` and prints the URLs taken.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.parse
from pathlib import Path

from mlflow.tracking import MlflowClient

RUNS = [  # what the new user ran: four methods and one setting changed
    ["fedvpt"],
    ["sgpt"],
    ["fgpt"],
    ["fedavg"],
    ["fedvpt", "--clients", "10", "--set", "data.alpha=0.1"],
]
SPACE = "space:\n  fedvpt.prompt_length: {choice: [1, 4]}\n  train.lr: {loguniform: [1.0e-3, 1.0e-2]}\n"
WINDOW = {"width": 1800, "height": 1100}
LOAD_TIMEOUT_MS = 120_000


def raysim() -> list[str]:
    """The ``raysim`` console script beside this Python (so runs record ``raysim run ...`` as their source)."""
    script = Path(sys.executable).with_name("raysim")
    return [str(script)] if script.exists() else [sys.executable, "-m", "raysim.cli"]


def make_runs(store: Path, sweep: bool) -> None:
    """The quick runs (and a sweep nested under its run) in ``store``/raysim-runs, as a user types them there."""
    for args in RUNS:
        print("running: raysim run", " ".join(args), "--preset quick", flush=True)
        subprocess.run([*raysim(), "run", *args, "--preset", "quick", "--no-progress"], cwd=store, check=True)
    if sweep:
        (store / "space.yaml").write_text(SPACE)
        command = ["tune", "fedvpt", "--space", "space.yaml", "--preset", "quick", "--num-samples", "2"]
        command += ["--name", "quick-sweep", "--experiment", "raysim", "--workers", "1", "--cpus-per-client", "0.5"]
        print("running: raysim", " ".join(command), flush=True)
        subprocess.run([*raysim(), *command], cwd=store, check=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def settle(page, text: str = "matching runs", seconds: float = 8.0) -> None:
    """Wait for ``text`` (the runs have loaded), then ``seconds`` for what loads after them (charts draw after their
    metric histories; the UI polls, so the network never goes idle)."""
    page.get_by_text(text).first.wait_for(timeout=LOAD_TIMEOUT_MS)
    page.wait_for_timeout(seconds * 1000)


def take(page, url: str, path: Path) -> None:
    page.screenshot(path=str(path), timeout=LOAD_TIMEOUT_MS)
    print(f"{path.name}: {url}", flush=True)


def screenshots(runs_url: str, compare_url: str, out: Path) -> None:
    """The runs table (as the printed URL opens it, the sweep's run expanded), the chart view, the compare view."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page(viewport=WINDOW)
        page.goto(runs_url)
        settle(page)
        close = page.get_by_role("button", name="Close")  # MLflow's assistant panel, open on a first visit
        if close.count():
            close.first.click()
        for expander in page.locator("button[data-component-id*='runnamecellrenderer']").all():
            expander.click()  # a sweep's run: show its trials
        settle(page, seconds=2)
        take(page, runs_url, out / "runs_table.png")
        chart_url = runs_url + "&compareRunsMode=CHART"
        page.set_viewport_size({"width": WINDOW["width"], "height": 1500})  # the summary section and the curves
        page.goto(chart_url)
        settle(page)
        take(page, chart_url, out / "chart_view.png")
        page.get_by_text("summary", exact=True).first.click()  # fold the summary section: the curves below it
        settle(page)
        take(page, chart_url, out / "chart_view_curves.png")
        page.goto(compare_url)
        settle(page, "Run ID")
        take(page, compare_url, out / "compare_view.png")
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="Folder for the PNGs.")
    parser.add_argument("--no-sweep", action="store_true", help="Only the runs, no 2-trial sweep.")
    parser.add_argument("--keep", action="store_true", help="Keep the store (in --out/store) for the next call.")
    args = parser.parse_args()
    if not shutil.which("chromium") or importlib.util.find_spec("playwright") is None:
        sys.exit("needs Debian's chromium and playwright: apt-get install -y chromium && pip install playwright")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    store = out / "store" if args.keep else Path(tempfile.mkdtemp(prefix="raysim-ui-"))
    store.mkdir(exist_ok=True)
    if not (store / "raysim-runs" / "mlflow.db").exists():
        make_runs(store, sweep=not args.no_sweep)
    port = free_port()
    ui = subprocess.Popen([*raysim(), "ui", "--port", str(port)], cwd=store, stdout=subprocess.PIPE, text=True)
    try:
        runs_url = ui.stdout.readline().strip()  # the URL raysim ui prints once the server answers
        print("raysim ui printed:", runs_url, flush=True)
        client = MlflowClient(f"sqlite:///{store}/raysim-runs/mlflow.db")
        experiment = client.get_experiment_by_name("raysim").experiment_id
        runs = client.search_runs([experiment], max_results=100)
        loose = [r.info.run_id for r in runs if not {"raysim.kind", "mlflow.parentRunId"} & set(r.data.tags)]
        ids = {"runs": json.dumps(loose), "experiments": json.dumps([experiment]), "workflowType": "machine_learning"}
        query = urllib.parse.urlencode(ids)
        screenshots(runs_url, f"{runs_url.split('#', 1)[0]}#/compare-runs?{query}", out)
    finally:
        ui.send_signal(signal.SIGTERM)  # raysim ui stops its MLflow server on the way out
        ui.wait(timeout=30)
        if not args.keep:
            shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
