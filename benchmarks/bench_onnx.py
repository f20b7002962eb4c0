#!/usr/bin/env python
"""ONNX export on the CPU: speed of onnxruntime fp32 and int8 against PyTorch eager fp32, and int8's accuracy change.

One trained model, in one run:

1. **A real task.** The members (MiniLM-L6 + MPNet-base by default) are frozen; each runs once over a slice of the
   task's training set (``--train_samples``) and over its full dev set (``hf_multiencoder.training.frozen``), and a
   DME fusion + classifier is trained on the stored mean-pooled vectors. The model (members + trained head) is
   exported with ``hf_multiencoder.deploy.onnx.export_onnx(..., quantize=True)``.
2. **Accuracy.** The full dev set goes through PyTorch fp32, onnxruntime fp32 and onnxruntime int8 (dynamic
   quantization: int8 weights, activations quantized per batch), in the same batches: accuracy, agreement with
   PyTorch's predictions, the largest logit difference, the mean fusion weights.
3. **Speed.** Latency at batch 1 (one median-length dev sentence) and throughput at batch 32 (the first 32 dev
   sentences), on inputs tokenized beforehand (tokenization is timed on its own), the contestants run in turn with
   the order reversed every round (``timing.interleaved_median_ms``), one thread each (``torch.set_num_threads(1)``,
   onnxruntime ``intra_op_num_threads=1``). bf16 is not a contestant where the CPU has no bf16 units (the
   ``precision_multiencoder.bf16_pays`` check): there it is emulated and far slower than fp32.

Results go to ``--out`` (JSON) and the same name with ``.md``.

    HF_HUB_OFFLINE=1 python benchmarks/bench_onnx.py                   # MiniLM + MPNet, SST-2, about 20 min, 1 core
    python benchmarks/bench_onnx.py --tiny --train_samples 64          # tiny random members: a smoke test
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import transformers
from harness import DEFAULT_MEMBERS, REPO_ROOT, benchmark_main, environment, short_name, start_run
from timing import cleanup, interleaved_median_ms

from hf_multiencoder.data.loading import load_task, local_path
from hf_multiencoder.data.tasks import get_task
from hf_multiencoder.deploy.onnx import ONNX_FILE, ONNX_INT8_FILE, OnnxMultiEncoder, export_onnx
from hf_multiencoder.models.modeling_multiencoder import mean_fusion_weights
from hf_multiencoder.models.precision_multiencoder import bf16_pays
from hf_multiencoder.testing_utils import build_tiny_encoders
from hf_multiencoder.training.frozen import encode_task, train_head


@dataclass
class OnnxBenchmarkArguments:
    members: list[str] = field(default_factory=lambda: list(DEFAULT_MEMBERS),
                               metadata={"help": "Member checkpoints (names or folders AutoModel accepts)."})
    tiny: bool = field(default=False, metadata={"help": "Tiny random members (a smoke test in seconds)."})
    task: str = field(default="sst2", metadata={"help": "A sentence-level classification task of the registry."})
    data_dir: str | None = field(default=None, metadata={"help": "The data folder (default: ../shared/data)."})
    train_samples: int = field(default=1000, metadata={"help": "Training examples the head learns from."})
    epochs: int = field(default=8, metadata={"help": "Epochs of the head on the stored vectors."})
    max_seq_length: int = field(default=128, metadata={"help": "Truncation length."})
    batch_size: int = field(default=32, metadata={"help": "Batch of the throughput runs and of the dev passes."})
    latency_repeats: int = field(default=20, metadata={"help": "Timed batch-1 rounds (the median is reported)."})
    throughput_repeats: int = field(default=5, metadata={"help": "Timed batch-32 rounds (the median is reported)."})
    threads: int = field(default=1, metadata={"help": "Threads of PyTorch and of onnxruntime."})
    seed: int = field(default=1, metadata={"help": "Seed of the head's training."})
    out: str | None = field(default=None, metadata={
        "help": "JSON result path (default results/bench_onnx[_tiny].json); .md next to it."})
    device: str = field(default="cpu", metadata={"help": "cpu (onnxruntime runs on the CPU here)."})

    def __post_init__(self):
        if self.device != "cpu":
            raise ValueError("The ONNX benchmark runs on the CPU.")
        spec = get_task(self.task)
        if spec.kind != "sequence" or spec.is_regression:
            raise ValueError(f"The benchmark measures accuracy of sentence classification; {spec.name} is not.")
        self.task = spec.name
        if min(self.train_samples, self.epochs, self.batch_size, self.latency_repeats, self.throughput_repeats,
               self.threads) < 1:
            raise ValueError("`train_samples`, `epochs`, `batch_size`, the repeats and `threads` must be positive.")
        if self.tiny:
            self.max_seq_length = min(self.max_seq_length, 60)  # the tiny members have 64 positions
        if self.out is None:
            self.out = os.path.join(REPO_ROOT, "results", "bench_onnx" + ("_tiny" if self.tiny else "") + ".json")


def train_model(args, members: list[str], names: list[str]) -> tuple[dict, object]:
    """Frozen members, a DME head trained on their stored vectors: the result of `train_head` and the task."""
    frozen = encode_task(args.task, members, encoder_names=names, poolings=["mean"], max_length=args.max_seq_length,
                         data_dir=args.data_dir,  # the default feature cache: a second run reads the vectors back
                         max_train_samples=args.train_samples)
    result = train_head(frozen, members=names, fusion="dme", pooling="mean", seed=args.seed, epochs=args.epochs,
                        return_model=True)
    result["encode_seconds"] = round(frozen.seconds, 1)
    return result, frozen


def dev_texts(args, spec) -> tuple[list, list | None, np.ndarray]:
    """The dev set's texts (and pairs) and labels, in the order the head was evaluated on them."""
    raw, _ = load_task(spec, data_dir=args.data_dir, from_hub=False)
    dev = raw[spec.validation_splits[0]]
    keys = spec.text_keys
    pairs = list(dev[keys[1]]) if len(keys) > 1 else None
    return list(dev[keys[0]]), pairs, np.asarray(dev["label"])


def predictions(run_batch, texts, pairs, batch_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Logits and fusion weights of every dev example, in batches of `batch_size` (the same for every contestant)."""
    logits, weights = [], []
    for start in range(0, len(texts), batch_size):
        out = run_batch(texts[start:start + batch_size], None if pairs is None else pairs[start:start + batch_size])
        logits.append(out[0])
        weights.append(out[1])
    return np.concatenate(logits), (np.concatenate(weights) if weights[0] is not None else None)


def run(args: OnnxBenchmarkArguments) -> dict:
    workdir = start_run(args, "bench_onnx_")  # threads, no progress bars
    transformers.logging.disable_progress_bar()
    members = build_tiny_encoders(os.path.join(workdir, "tiny"))[:2] if args.tiny else args.members
    names = [short_name(m) for m in members]

    start = time.perf_counter()
    trained, frozen = train_model(args, members, names)
    train_seconds = time.perf_counter() - start
    model, tokenizer = trained["model"].eval(), trained["tokenizer"]
    folder = os.path.join(workdir, "onnx")
    start = time.perf_counter()
    export_onnx(model, folder, tokenizer=tokenizer, quantize=True)
    export_seconds = time.perf_counter() - start
    fp32 = OnnxMultiEncoder(folder, num_threads=args.threads)
    int8 = OnnxMultiEncoder(folder, quantized=True, num_threads=args.threads)
    max_lengths = fp32.member_max_lengths(args.max_seq_length)

    def tokenize(texts, pairs=None):
        return tokenizer(texts, text_pair=pairs, padding=True, truncation=True, max_length=max_lengths,
                         return_tensors="pt")

    @torch.inference_mode()
    def torch_batch(texts, pairs):
        out = model(**tokenize(texts, pairs))
        return out.logits.numpy(), None if out.fusion_weights is None else out.fusion_weights.numpy()

    def onnx_batch(runner):
        def run_batch(texts, pairs):
            out = runner(texts, pairs, max_length=args.max_seq_length)
            return out["logits"], out["fusion_weights"]

        return run_batch

    # ---- accuracy on the full dev set ----
    texts, pairs, labels = dev_texts(args, frozen.spec)
    accuracy = {}
    reference = None
    for name, run_batch in (("pytorch_fp32", torch_batch), ("onnx_fp32", onnx_batch(fp32)),
                            ("onnx_int8", onnx_batch(int8))):
        start = time.perf_counter()
        logits, weights = predictions(run_batch, texts, pairs, args.batch_size)
        seconds = time.perf_counter() - start
        pred = logits.argmax(-1)
        reference = (logits, pred) if reference is None else reference
        accuracy[name] = {
            "accuracy": float((pred == labels).mean()),
            "agreement_with_pytorch": float((pred == reference[1]).mean()),
            "max_abs_logit_diff_vs_pytorch": float(np.abs(logits - reference[0]).max()),
            "mean_fusion_weights": None if weights is None else mean_fusion_weights(weights, names),
            "dev_pass_seconds": round(seconds, 1),
        }
    for name in ("onnx_fp32", "onnx_int8"):
        accuracy[name]["accuracy_change_vs_pytorch"] = accuracy[name]["accuracy"] - accuracy["pytorch_fp32"][
            "accuracy"]

    # ---- speed: inputs tokenized once, the engines timed in turn ----
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    one = [order[len(order) // 2]]  # a median-length dev example
    batch = list(range(min(args.batch_size, len(texts))))
    timing = {}
    for label, rows, repeats in (("batch_1", one, args.latency_repeats),
                                 (f"batch_{len(batch)}", batch, args.throughput_repeats)):
        chunk = [texts[i] for i in rows]
        chunk_pairs = None if pairs is None else [pairs[i] for i in rows]
        torch_inputs = tokenize(chunk, chunk_pairs)
        feed = fp32.tokenize(chunk, chunk_pairs, max_length=args.max_seq_length)
        contestants = {
            "pytorch_fp32": torch.inference_mode()(lambda b=torch_inputs: model(**b)),
            "onnx_fp32": lambda f=feed: fp32.run(f),
            "onnx_int8": lambda f=feed: int8.run(f),
            "tokenize": lambda c=chunk, p=chunk_pairs: fp32.tokenize(c, p, max_length=args.max_seq_length),
        }
        ms = interleaved_median_ms(contestants, repeats=repeats, device="cpu", warmup=1)
        timing[label] = {
            "batch_size": len(rows), "repeats": repeats,
            "tokens_per_member": [int(feed[f"input_ids_{i}"].shape[1]) for i in range(len(names))],
            "ms": ms, "examples_per_second": {k: len(rows) / v * 1000 for k, v in ms.items()},
            "speedup_vs_pytorch": {k: ms["pytorch_fp32"] / ms[k] for k in ("onnx_fp32", "onnx_int8")},
        }

    device_name, versions = environment(args)
    import onnxruntime

    versions["onnxruntime"] = onnxruntime.__version__
    sizes = {f: os.path.getsize(os.path.join(folder, f)) / 2**20 for f in (ONNX_FILE, ONNX_INT8_FILE)}
    spec = frozen.spec
    results = {
        "accuracy": accuracy,
        "timing": timing,
        "model_mb": sizes,
        "bf16": {"measured": False, "pays": bf16_pays("cpu")[0], "why": bf16_pays("cpu")[1]},
        "device": device_name,
        "versions": versions,
        "settings": {
            "members": names, "task": spec.name, "metric": "accuracy",
            "data": os.path.relpath(local_path(spec, args.data_dir), REPO_ROOT),
            "train_samples": frozen.examples["train"], "dev_samples": frozen.examples["validation"],
            "head": "frozen members, dme fusion + linear classifier on mean-pooled vectors",
            "epochs": args.epochs, "seed": args.seed, "max_seq_length": args.max_seq_length,
            "threads": args.threads, "tiny": args.tiny, "load_average": os.getloadavg(),
            "exporter": fp32.onnx_config["exporter"], "opset": fp32.onnx_config["opset"],
            "quantization": "onnxruntime.quantization.quantize_dynamic: QInt8 weights per channel, reduce_range "
                            "(7-bit), dynamic uint8 activations",
            "seconds": {"members_and_head": round(train_seconds, 1), "export_and_quantize": round(export_seconds, 1),
                        "members_encoding": trained["encode_seconds"]},
            "head_dev_accuracy_by_epoch": trained["epoch_scores"],
        },
    }
    cleanup()
    return results


def markdown(results: dict) -> str:
    s, acc = results["settings"], results["accuracy"]
    lines = [f"ONNX on {results['device']}; members {' + '.join(s['members'])} (frozen), "
             f"a DME head trained on {s['train_samples']} {s['task']} training examples; torch "
             f"{results['versions']['torch']}, onnxruntime {results['versions']['onnxruntime']}, exporter "
             f"{s['exporter']} (opset {s['opset']}). Speed: inputs tokenized beforehand, median of interleaved "
             f"rounds.", "",
             "| engine | " + " | ".join(f"{k.replace('_', ' ')} ms" for k in results["timing"])
             + " | " + " | ".join(f"{k.replace('_', ' ')} ex/s" for k in results["timing"])
             + f" | {s['task']} dev accuracy ({s['dev_samples']}) | agreement with PyTorch | max logit diff |",
             "|---|" + "---|" * (2 * len(results["timing"]) + 3)]
    for engine in ("pytorch_fp32", "onnx_fp32", "onnx_int8", "tokenize"):
        ms = [f"{t['ms'][engine]:.1f}" for t in results["timing"].values()]
        eps = [f"{t['examples_per_second'][engine]:.1f}" for t in results["timing"].values()]
        a = acc.get(engine)
        tail = (f"{100 * a['accuracy']:.2f} | {100 * a['agreement_with_pytorch']:.2f}% | "
                f"{a['max_abs_logit_diff_vs_pytorch']:.1e}") if a else "- | - | -"
        lines.append(f"| {engine.replace('_', ' ')} | " + " | ".join(ms + eps) + f" | {tail} |")
    lines += ["", "| ratio | value |", "|---|---|"]
    for label, t in results["timing"].items():
        for k, v in t["speedup_vs_pytorch"].items():
            lines.append(f"| {k} speed-up over PyTorch, {label.replace('_', ' ')} | {v:.2f}x |")
    for k in ("onnx_fp32", "onnx_int8"):
        lines.append(f"| {k} accuracy change (points) | {100 * acc[k]['accuracy_change_vs_pytorch']:+.2f} |")
    sizes = results["model_mb"]
    lines.append(f"| model size fp32 / int8 (MB) | {sizes[ONNX_FILE]:.0f} / {sizes[ONNX_INT8_FILE]:.0f} |")
    lines += ["", f"bf16: not measured ({results['bf16']['why']})."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    return benchmark_main(OnnxBenchmarkArguments, run, markdown, argv)


if __name__ == "__main__":
    main()
