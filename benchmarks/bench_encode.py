#!/usr/bin/env python
"""Sentence-embedding throughput of the fused multi-encoder against its members, in one run.

On the same sentences (STS-B dev by default), the same batch size and the same longest-first batching, it times:

* ``plain/<member>``: the member alone with plain transformers (``AutoModel``, its tokenizer, mean pooling): the
  baseline;
* ``st/<member>``: the member as the stock ``SentenceTransformer`` loads it (what users run today);
* ``plugin/<member>``: ``MultiEncoderModel.encode`` with only that member (the plugin's own overhead);
* ``fused``: ``MultiEncoderModel.encode`` with every member (``concat`` fusion, normalised concatenation);
* ``fused_st``: the fused model as a SentenceTransformer (``hf_multiencoder.to_sentence_transformer``).

Contestants run in turn, the order reversed every round (``timing.interleaved_median_ms``), so a drift of the shared
machine's speed hits all alike; the median over ``--repeats`` rounds is reported as sentences per second, with the
ratios ``plugin_over_plain`` (throughput, per member), ``fused_over_sum`` (fused time / sum of the plain members'
times: 1.0 means fusing costs nothing beyond running the members) and ``st_module_over_encode`` (fused throughput
through sentence-transformers / through ``encode``). Results go to ``--out`` (JSON) and the same name with ``.md``.

    python benchmarks/bench_encode.py                        # CPU or CUDA, STS-B dev, MiniLM + MPNet
    python benchmarks/bench_encode.py --tiny --threads 1     # tiny random members: a smoke test in seconds
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field

import torch
import transformers
from harness import DEFAULT_MEMBERS, REPO_ROOT, benchmark_main, environment, short_name, synthetic_split
from timing import cleanup, interleaved_median_ms
from transformers import AutoModel, AutoTokenizer

from hf_multiencoder import MultiEncoderModel, MultiEncoderTokenizer, load_task
from hf_multiencoder.data.loading import local_path
from hf_multiencoder.testing_utils import build_tiny_encoders


@dataclass
class EncodeBenchmarkArguments:
    members: list[str] = field(default_factory=lambda: list(DEFAULT_MEMBERS),
                               metadata={"help": "Member checkpoints (names or folders AutoModel accepts)."})
    tiny: bool = field(default=False, metadata={"help": "Tiny random members (a smoke test in seconds)."})
    data_dir: str | None = field(default=None, metadata={"help": "The data folder (default: ../shared/data)."})
    sentences: int = field(default=512, metadata={"help": "STS-B dev sentences encoded per round."})
    batch_size: int = field(default=32, metadata={"help": "Sentences per forward pass."})
    max_seq_length: int = field(default=128, metadata={"help": "Truncation length."})
    repeats: int = field(default=3, metadata={"help": "Timed rounds (the median is reported)."})
    device: str | None = field(default=None, metadata={"help": "cpu or cuda (default: cuda when available)."})
    threads: int | None = field(default=None, metadata={"help": "torch.set_num_threads (CPU)."})
    skip_st: bool = field(default=False, metadata={"help": "Do not time the SentenceTransformer contestants."})
    out: str | None = field(default=None, metadata={
        "help": "JSON result path (default benchmarks/results/encode_<device>[_tiny].json); .md next to it."})

    def __post_init__(self):
        if self.device is None:
            self.device = "cuda" if torch.cuda.is_available() else "cpu"
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"`device` must be 'cpu' or 'cuda', got {self.device!r}.")
        if self.sentences < 1 or self.batch_size < 1 or self.repeats < 1:
            raise ValueError("`sentences`, `batch_size` and `repeats` must be positive.")
        if self.tiny:
            self.max_seq_length = min(self.max_seq_length, 60)  # the tiny members have 64 positions
        if self.out is None:
            name = f"encode_{self.device}" + ("_tiny" if self.tiny else "")
            self.out = os.path.join(REPO_ROOT, "benchmarks", "results", f"{name}.json")


def load_sentences(args: EncodeBenchmarkArguments) -> tuple[list[str], str]:
    """The first ``args.sentences`` distinct sentences of STS-B dev (generated ones for ``--tiny`` without data)."""
    try:
        raw, spec = load_task("stsb", data_dir=args.data_dir, from_hub=False)
    except FileNotFoundError:
        if not args.tiny:
            raise
        return synthetic_split(("sentence1",), args.sentences, seed=0)["sentence1"], "synthetic"
    dev = raw["validation"]
    sentences = list(dict.fromkeys([*dev["sentence1"], *dev["sentence2"]]))[:args.sentences]
    return sentences, os.path.relpath(local_path(spec, args.data_dir), REPO_ROOT)


def plain_encoder(member: str, sentences: list[str], args, device):
    """The member alone with plain transformers, batched longest-first as ``encode`` batches: mean pooling."""
    tokenizer, model = AutoTokenizer.from_pretrained(member), AutoModel.from_pretrained(member).to(device).eval()
    order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))

    @torch.inference_mode()
    def run():
        out = []
        for start in range(0, len(order), args.batch_size):
            batch = tokenizer([sentences[i] for i in order[start:start + args.batch_size]], padding=True,
                              truncation=True, max_length=args.max_seq_length, return_tensors="pt").to(device)
            states = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)
            out.append(((states * mask).sum(1) / mask.sum(1)).cpu())
        return torch.cat(out)

    return run


def run(args: EncodeBenchmarkArguments) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    members = build_tiny_encoders(tempfile.mkdtemp(prefix="bench_encode_"))[:2] if args.tiny else args.members
    names = [short_name(m) for m in members]
    sentences, source = load_sentences(args)
    device = torch.device(args.device)
    encode_kwargs = {"batch_size": args.batch_size, "max_length": args.max_seq_length, "show_progress_bar": False}

    contestants = {}
    for member, name in zip(members, names):
        contestants[f"plain/{name}"] = plain_encoder(member, sentences, args, device)
        plugin = MultiEncoderModel.from_encoders([member], encoder_names=[name], fusion="concat").to(device)
        plugin_tok = MultiEncoderTokenizer.from_encoders([member], encoder_names=[name])
        contestants[f"plugin/{name}"] = lambda m=plugin, t=plugin_tok: m.encode(sentences, tokenizer=t,
                                                                                 **encode_kwargs)
    fused = MultiEncoderModel.from_encoders(members, encoder_names=names, fusion="concat").to(device)
    fused_tok = MultiEncoderTokenizer.from_encoders(members, encoder_names=names)
    contestants["fused"] = lambda: fused.encode(sentences, tokenizer=fused_tok, **encode_kwargs)
    if not args.skip_st:
        from sentence_transformers import SentenceTransformer

        from hf_multiencoder import to_sentence_transformer

        st_kwargs = {"batch_size": args.batch_size, "show_progress_bar": False}
        if not args.tiny:  # the tiny members are plain HF folders, no SentenceTransformer
            for member, name in zip(members, names):
                plain_st = SentenceTransformer(member, device=args.device)
                plain_st.max_seq_length = args.max_seq_length
                contestants[f"st/{name}"] = lambda s=plain_st: s.encode(sentences, **st_kwargs)
        fused_st = to_sentence_transformer(fused, fused_tok, max_seq_length=args.max_seq_length, device=args.device)
        contestants["fused_st"] = lambda: fused_st.encode(sentences, **st_kwargs)

    ms = interleaved_median_ms(contestants, repeats=args.repeats, device=args.device, warmup=1)
    runs = {name: {"ms": t, "sentences_per_second": len(sentences) / t * 1000} for name, t in ms.items()}
    plain_sum = sum(ms[f"plain/{n}"] for n in names)
    per_member = {n: runs[f"plugin/{n}"]["sentences_per_second"] / runs[f"plain/{n}"]["sentences_per_second"]
                  for n in names}
    results = {
        "plugin_over_plain": min(per_member.values()), "plugin_over_plain_per_member": per_member,
        "fused_over_sum": ms["fused"] / plain_sum,
        "fused_over_slowest_plain": runs["fused"]["sentences_per_second"] / min(
            runs[f"plain/{n}"]["sentences_per_second"] for n in names),
    }
    if "fused_st" in runs:
        results["st_module_over_encode"] = runs["fused_st"]["sentences_per_second"] / runs["fused"][
            "sentences_per_second"]
    device_name, versions = environment(args)
    results.update({"device": device_name, "versions": versions, "runs": runs,
                    "settings": {"members": names, "data": source, "sentences": len(sentences),
                                 "batch_size": args.batch_size, "max_seq_length": args.max_seq_length,
                                 "repeats": args.repeats, "tiny": args.tiny, "load_average": os.getloadavg()}})
    contestants.clear()
    cleanup()
    return results


def markdown(results: dict) -> str:
    s = results["settings"]
    lines = [f"Encode throughput on {results['device']}: {s['sentences']} sentences of {s['data']}, batch "
             f"{s['batch_size']}, max_seq_length {s['max_seq_length']}, median of {s['repeats']} interleaved rounds "
             f"(transformers {results['versions']['transformers']}, torch {results['versions']['torch']}).", "",
             "| run | sentences/s | ms per round |", "|---|---|---|"]
    for name, run_ in results["runs"].items():
        lines.append(f"| {name} | {run_['sentences_per_second']:.1f} | {run_['ms']:.0f} |")
    lines += ["", "| ratio | value |", "|---|---|"]
    for key in ("plugin_over_plain", "fused_over_sum", "fused_over_slowest_plain", "st_module_over_encode"):
        if key in results:
            lines.append(f"| {key} | {results[key]:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    return benchmark_main(EncodeBenchmarkArguments, run, markdown, argv)


if __name__ == "__main__":
    main()
