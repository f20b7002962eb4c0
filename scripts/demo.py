"""`make demo`: tune two real pretrained encoders together on real CoLA, compare with each alone, show the fusion
weights, and load the saved model back with the Auto classes.

    python scripts/demo.py [--config configs/demo.yaml] [--budget_s 400]

The single-member baselines run only while the time budget allows (the fused run's time predicts theirs).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import run_glue_multi  # noqa: E402

MEMBERS = {  # display name -> (checkpoint, learning rate, share of the fused pair's time it costs alone; measured on
    # a 2-core CPU: MiniLM 0.13, MPNet 0.83)
    "MiniLM": ("sentence-transformers/all-MiniLM-L6-v2", "1e-4", 0.15),
    "MPNet": ("sentence-transformers/all-mpnet-base-v2", "4e-5", 0.85),
}


def say(msg: str) -> None:
    print(f"\n[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(config: str, overrides: list[str]) -> tuple[dict, float]:
    start = time.time()
    table = run_glue_multi.main([config, *overrides, "--overwrite_output_dir", "true"])  # the demo reruns
    return table, time.time() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=os.path.join(REPO, "configs", "demo.yaml"))
    ap.add_argument("--budget_s", type=float, default=float(os.environ.get("DEMO_BUDGET_S", 400)))
    ap.add_argument("--output_dir", default=os.path.join(REPO, "outputs", "demo"))
    args = ap.parse_args()
    t0 = time.time()

    say("Fine-tuning MiniLM + MPNet together (DME fusion) on a slice of real CoLA; dev = all 1043 sentences.")
    fused_dir = os.path.join(args.output_dir, "dme")
    fused, fused_s = run(args.config, ["--output_dir", fused_dir])
    rows = [("MiniLM + MPNet (DME)", fused["best_epoch"]["median"], fused_s)]

    for name, (checkpoint, lr, share) in MEMBERS.items():
        left = args.budget_s - (time.time() - t0)
        if share * fused_s > left:
            say(f"Skipping {name} alone: it would take about {share * fused_s:.0f}s, {left:.0f}s of budget left.")
            continue
        say(f"Baseline: {name} alone, same data and settings.")
        table, secs = run(args.config, ["--encoders", checkpoint, "--encoder_names", name, "--fusion", "concat",
                                        "--encoder_learning_rates", lr,
                                        "--output_dir", os.path.join(args.output_dir, name.lower())])
        rows.append((f"{name} alone", table["best_epoch"]["median"], secs))

    say("Results on the CoLA dev set (Matthews correlation x100):")
    print(f"{'model':<24} {'MCC x100':>9} {'seconds':>8}")
    for model, score, secs in rows:
        print(f"{model:<24} {score:>9.2f} {secs:>8.0f}")

    say("How much of each member the fused model used:")
    print(run_glue_multi.format_fusion_report(fused["runs"][0]["fusion"]))

    say(f"Loading the saved model from {fused_dir} with the Auto classes (trust_remote_code=True):")
    from transformers import AutoModelForSequenceClassification, pipeline

    model = AutoModelForSequenceClassification.from_pretrained(fused_dir, trust_remote_code=True)
    print(f"loaded {type(model).__name__} with members {model.config.encoder_names}")
    classifier = pipeline("text-classification", model=fused_dir, trust_remote_code=True)
    print("pipeline('He can will go') ->", classifier("He can will go"))
    say(f"Done in {time.time() - t0:.0f}s.")


if __name__ == "__main__":
    main()
