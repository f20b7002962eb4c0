"""`make demo`: the seed's question on real data in a few minutes of CPU: does fusing two pretrained encoders add
information over each alone?

    python scripts/demo.py [--seeds 1 2 3] [--epochs 8] [--output_dir outputs/demo]

On the full CoLA training set (8551 sentences) and dev set (1043): the real all-MiniLM-L6-v2 and all-mpnet-base-v2 run
once, frozen, over every sentence (the feature cache; `last4` pooling: the token mean of each of the last four layers,
concatenated, which scores far above `cls` or `mean` for frozen members, see results/glue_frozen.md); then heads train
on these sentence vectors with the stock Trainer: each member alone, and the pair fused by concatenation, DME and a
projected mean, each with several seeds. The demo prints the table (dev Matthews correlation, median and spread over
the seeds), the DME model's fusion weights (overall and for dev sentences, with their gold labels), saves that model
and loads it back with the Auto classes and `pipeline`, where hf_multiencoder is not needed. What it does not show:
tuning the members themselves (the project's main use, `run_glue_multi.py` and the GPU sweep in
`scripts/glue_sweep.py`), which scores far higher on CoLA.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from transformers import AutoModelForSequenceClassification, pipeline

from hf_multiencoder import load_task
from hf_multiencoder.training.frozen import encode_task, train_head
from hf_multiencoder.training.protocol import REAL_MEMBERS
from hf_multiencoder.training.results import summarize

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENCODERS = REAL_MEMBERS
ROWS = {  # the table's rows: (members, fusion)
    "MiniLM alone": (["MiniLM"], "concat"),
    "MPNet alone": (["MPNet"], "concat"),
    "MPNet alone, DME head": (["MPNet"], "dme"),  # the fused rows' projection, one member: what fusion adds beyond it
    "MiniLM + MPNet, concat": (["MiniLM", "MPNet"], "concat"),
    "MiniLM + MPNet, DME": (["MiniLM", "MPNet"], "dme"),
    "MiniLM + MPNet, mean": (["MiniLM", "MPNet"], "mean"),
}
SHOWN = 6  # dev sentences shown with their fusion weights
POOLING = "last4"
FUSION_DIM = 256  # DME and mean project each member's 4 x width vector to this size (the widest, 3072, is 12x slower)


def say(msg: str) -> None:
    print(f"\n[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--output_dir", default=os.path.join(REPO, "outputs", "demo"))
    args = ap.parse_args()
    t0 = time.time()

    say("Running MiniLM and MPNet, frozen, once over all of CoLA (8551 training + 1043 dev sentences) ...")
    frozen = encode_task("cola", list(ENCODERS.values()), encoder_names=list(ENCODERS), poolings=[POOLING],
                         max_length=64, cache_dir=os.path.join(args.output_dir, "feature_cache"))
    say(f"Members done in {frozen.seconds:.0f}s (read back from the cache on a rerun). Training a head per row, "
        f"{len(args.seeds)} seeds each, {args.epochs} epochs, on the stored sentence vectors ...")
    torch.set_num_threads(1)  # a head's steps are tiny: more threads only wait on each other
    table, dme = {}, None
    for row, (members, fusion) in ROWS.items():
        runs = [train_head(frozen, members, fusion=fusion, pooling=POOLING, seed=seed, batch_size=128,
                           fusion_dim=FUSION_DIM, epochs=args.epochs,
                           return_model=(fusion == "dme" and len(members) > 1 and seed == args.seeds[0]))
                for seed in args.seeds]
        table[row] = (summarize((r["best_epoch_score"] for r in runs), scale=100),
                      sum(r["train_seconds"] for r in runs))
        dme = next((r for r in runs if "model" in r), dme)
        print(f"  {row}: {table[row][0]['median']:.1f}", flush=True)

    say("CoLA dev, Matthews correlation x100 (best of each run's epochs; median, mean ± std over the seeds):")
    print(f"{'model':<26} {'median':>7} {'mean ± std':>13} {'head s':>7}")
    for row, (s, seconds) in table.items():
        print(f"{row:<26} {s['median']:>7.1f} {s['mean']:>7.1f} ± {s['std']:<4.1f} {seconds:>7.0f}")
    best_member = max(table[r][0]["median"] for r in ROWS if "alone" in r)
    best_fused = max(table[r][0]["median"] for r in ROWS if "+" in r)
    print(f"best fused - best single-member row (the DME-head control included): {best_fused - best_member:+.1f} MCC "
          f"points")

    say("How much of each member the DME model uses (seed {}):".format(dme["seed"]))
    print("mean fusion weight on the dev set: " + ", ".join(f"{k} {v:.2f}" for k, v in dme["fusion_weights"].items()))
    model, tokenizer = dme["model"], dme["tokenizer"]
    dev = load_task("cola")[0]["validation"].select(range(SHOWN))
    sentences, gold = dev["sentence1"], [frozen.spec.label_list[i] for i in dev["label"]]
    shown = model.predict_with_fusion_weights(tokenizer, sentences)
    for sentence, label, pred, weights in zip(sentences, gold, shown["Predictions"], shown["fusion_weights"]):
        print(f"  {sentence!r}: predicted {pred}, gold {label}; " + ", ".join(f"{k} {w:.2f}"
                                                                            for k, w in weights.items()))

    folder = os.path.join(args.output_dir, "dme")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    say(f"Saved the DME model to {folder}; loading it back with the Auto classes (trust_remote_code=True):")
    loaded = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
    print(f"loaded {type(loaded).__name__} with members {loaded.config.encoder_names}")
    classifier = pipeline("text-classification", model=folder, trust_remote_code=True)
    print(f"pipeline({sentences[0]!r}) ->", classifier(sentences[0]))
    say(f"Done in {time.time() - t0:.0f}s.")


if __name__ == "__main__":
    main()
