"""Regenerate the demo page's screenshot (docs/img/demo.png): `space/app.py` on a real model, in headless chromium.

    python scripts/demo_screenshot.py [--model FOLDER_OR_HUB_ID] [--output docs/img/demo.png]

Without `--model` it builds one (once; reused from `--work_dir` afterwards): the real all-MiniLM-L6-v2 and
all-mpnet-base-v2, frozen, each run once over the first `--max_train_samples` CoLA training sentences and the dev set
(`last4` pooling), and a DME head (projection to 256, softmax over the two members) trained on their vectors for a
few epochs with the stock Trainer, as `make demo` does on the full set. A few minutes on one CPU core. The dev
Matthews correlation goes to `model_info.json` beside the model, for the caption.

Then it launches `space/app.py` in a subprocess with `MODEL` set (the app needs only torch, transformers and
gradio), opens the page in Debian's `chromium` driven by playwright (`pip install playwright`; playwright's own browser
download is not needed), types `--sentence`, submits, waits for the fusion weights and writes the screenshot.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

from hf_multiencoder.training.protocol import REAL_MEMBERS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENCODERS = REAL_MEMBERS


def build_model(folder: str, max_train_samples: int, epochs: int) -> dict:
    """Train the DME head on frozen members (module docstring) and save the model and tokenizer to `folder`."""
    import torch

    from hf_multiencoder.training.frozen import encode_task, train_head

    frozen = encode_task("cola", list(ENCODERS.values()), encoder_names=list(ENCODERS), poolings=["last4"],
                         max_length=64, cache_dir=os.path.join(os.path.dirname(folder), "feature_cache"),
                         max_train_samples=max_train_samples)
    torch.set_num_threads(1)  # a head's steps are tiny
    result = train_head(frozen, list(ENCODERS), fusion="dme", pooling="last4", seed=1, epochs=epochs, batch_size=128,
                        fusion_dim=256, return_model=True)
    result["model"].save_pretrained(folder)
    result["tokenizer"].save_pretrained(folder)
    info = {"task": "cola", "train_sentences": frozen.examples["train"],
            "dev_sentences": frozen.examples["validation"],
            "epochs": epochs, "final_dev_mcc": result["final_epoch_score"], "best_dev_mcc": result["best_epoch_score"],
            "mean_dev_fusion_weights": result["fusion_weights"], "encode_seconds": round(frozen.seconds, 1),
            "head_seconds": result["train_seconds"]}
    with open(os.path.join(folder, "model_info.json"), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2)
    return info


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_app(model: str, port: int) -> subprocess.Popen:
    """`space/app.py` serving `model` on 127.0.0.1:`port`, once the page answers."""
    env = dict(os.environ, MODEL=model, GRADIO_SERVER_NAME="127.0.0.1", GRADIO_SERVER_PORT=str(port),
               GRADIO_ANALYTICS_ENABLED="False")
    app = subprocess.Popen([sys.executable, os.path.join(REPO, "space", "app.py")], env=env)
    deadline = time.time() + 300
    while time.time() < deadline:
        if app.poll() is not None:
            raise RuntimeError(f"space/app.py exited with status {app.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
            return app
        except OSError:
            time.sleep(1)
    app.terminate()
    raise TimeoutError("space/app.py did not answer within 300 s")


def screenshot(url: str, sentence: str, members: list[str], output: str) -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        raise RuntimeError("Debian's `chromium` is not on PATH (apt-get install chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--headless=new"])
        page = browser.new_page(viewport={"width": 1000, "height": 720}, device_scale_factor=1)
        page.goto(url)
        page.get_by_label("Sentence", exact=True).fill(sentence)
        page.get_by_role("button", name="Predict").click()
        table = page.locator("#fusion-weights-table")
        for name in members:
            table.get_by_role("gridcell", name=name, exact=True).wait_for(timeout=120_000)
        page.wait_for_timeout(1500)  # the bar chart draws after the table
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        page.screenshot(path=output, full_page=True)
        browser.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="a saved multi-encoder folder or Hub id (default: build one)")
    ap.add_argument("--work_dir", default=os.path.join(REPO, "outputs", "demo_screenshot"))
    ap.add_argument("--max_train_samples", type=int, default=4000)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--sentence", default="The more books I read, the more I understand.")
    ap.add_argument("--output", default=os.path.join(REPO, "docs", "img", "demo.png"))
    args = ap.parse_args()

    model = args.model
    if model is None:
        model = os.path.join(args.work_dir, "cola-dme")
        if not os.path.isfile(os.path.join(model, "model_info.json")):
            print(f"Building the model in {model} ...", flush=True)
            print(json.dumps(build_model(model, args.max_train_samples, args.epochs), indent=2), flush=True)
    from transformers import AutoConfig

    members = list(AutoConfig.from_pretrained(model, trust_remote_code=True).encoder_names)
    port = free_port()
    app = launch_app(model, port)
    try:
        screenshot(f"http://127.0.0.1:{port}/", args.sentence, members, args.output)
    finally:
        app.terminate()
        app.wait(timeout=30)
    print(f"Wrote {args.output} ({os.path.getsize(args.output) // 1024} KB)")


if __name__ == "__main__":
    main()
