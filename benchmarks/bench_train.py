#!/usr/bin/env python
"""Training and inference speed of the multi-encoder against its members trained alone, in one run.

On the same data and batch settings it measures, with the stock ``Trainer``:

* each member alone as a plain ``AutoModelForSequenceClassification`` (what users have today);
* the multi-encoder with that one member (the plugin's own overhead);
* the multi-encoder with all members, ``concat`` and ``dme`` fusion;
* the multi-encoder with every member frozen (only fusion + head train), with and without the feature cache
  (``hf_multiencoder.data.feature_cache``).

Training throughput is timed over ``--steps`` optimizer steps after ``--warmup`` steps (a ``TrainerCallback`` reads
the clock at the end of the warm-up step and of the last step, synchronising CUDA first); peak memory is
``torch.cuda.max_memory_allocated`` on CUDA and the process's peak RSS (``VmHWM``, reset before each run) on the CPU.
Inference: the Trainer's evaluation loop over the dev set, and ``pipeline("text-classification")`` over dev sentences.
Results go to ``--out`` (JSON) and the same name with ``.md`` (a table, also printed). See benchmarks/README.md.

    python benchmarks/bench_train.py                          # CPU or CUDA, CoLA, MiniLM + MPNet
    python benchmarks/bench_train.py --device cuda --bf16 --out benchmarks/results/h100_bf16.json
    python benchmarks/bench_train.py --long                   # RTE pairs at max_seq_length 256
    python benchmarks/bench_train.py --tiny                   # tiny random members: a smoke test in seconds
"""

from __future__ import annotations

import dataclasses
import math
import os
import time

import torch
from harness import (  # the shared benchmark machinery
    BenchmarkArguments,
    Entry,
    build_random_members,
    build_tiny_members,
    environment,
    evaluate_and_time,
    finish_train_result,
    load_splits,
    pipeline_and_time,
    save_results,
    short_name,
    start_run,
    text_inputs,
    train_window,
    training_arguments,
)
from timing import cleanup, round_summary, synchronize, time_collator
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    HfArgumentParser,
    Trainer,
    set_seed,
)

from hf_multiencoder import (
    MultiEncoderDataCollator,
    MultiEncoderForSequenceClassification,
    MultiEncoderTokenizer,
    freeze_encoders,
    get_task,
    tokenize_task,
)
from hf_multiencoder.data.feature_cache import CachedFeaturesCollator, add_member_features


def run(args: BenchmarkArguments) -> dict:
    workdir = start_run(args, "bench_train_")
    if args.tiny:
        members = build_tiny_members(os.path.join(workdir, "tiny"))
    elif args.random_weights:
        members = build_random_members(list(args.members), os.path.join(workdir, "random"), args.seed)
    else:
        members = list(args.members)
    spec = get_task(args.task)
    train_raw, dev_raw, source = load_splits(args)
    texts = text_inputs(dev_raw, spec.text_keys, args.pipeline_samples)
    device, versions = environment(args)
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"[bench] {device}; members {[short_name(m) for m in members]}; {args.task} from {source}; "
          f"{len(train_raw)} train / {len(dev_raw)} dev examples", flush=True)

    entries: list[Entry] = []
    started = time.perf_counter()

    def add(entry: Entry, model, tokenizer, cache: bool = False) -> None:
        """Prepare a contestant: its model, tokenized data and collator (and, for `cached`, its feature cache)."""
        entry.model, entry.tokenizer = model.to(args.device), tokenizer
        entry.train_ds = tokenize_task(train_raw, spec, tokenizer, args.max_seq_length)
        if entry.kind == "plain":
            entry.collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=args.pad_to_multiple_of)
        elif cache:
            synchronize(args.device)
            start = time.perf_counter()
            entry.train_ds = add_member_features(entry.train_ds, model, members=list(range(len(entry.members))),
                                                 batch_size=64, cache_dir=os.path.join(workdir, "feature_cache"))
            synchronize(args.device)
            entry.result["cache_build"] = {"seconds": time.perf_counter() - start, "examples": len(entry.train_ds)}
            entry.collator = CachedFeaturesCollator(tokenizer, pad_to_multiple_of=args.pad_to_multiple_of)
        else:
            entry.collator = MultiEncoderDataCollator(tokenizer, pad_to_multiple_of=args.pad_to_multiple_of)
        entry.result["collate_ms_per_batch"] = time_collator(entry.collator, entry.train_ds.remove_columns("length"),
                                                             args.batch_size)
        entries.append(entry)

    # the contestants: each member alone (the stock model, and the one-member plugin), the members fused, and the
    # fused model with every member frozen, run at every step or read from the feature cache
    for member in members:
        name = short_name(member)
        set_seed(args.seed)
        add(Entry(f"plain/{name}", "plain", [member]),
            AutoModelForSequenceClassification.from_pretrained(member, num_labels=2),
            AutoTokenizer.from_pretrained(member))
        set_seed(args.seed)
        add(Entry(f"plugin/{name}", "plugin", [member], args.single_fusion),
            MultiEncoderForSequenceClassification.from_encoders([member], fusion=args.single_fusion, num_labels=2),
            MultiEncoderTokenizer.from_encoders([member]))
    tokenizer = MultiEncoderTokenizer.from_encoders(members)
    for fusion in args.fusions:
        set_seed(args.seed)
        add(Entry(f"fused/{fusion}", "fused", members, fusion),
            MultiEncoderForSequenceClassification.from_encoders(members, fusion=fusion, num_labels=2), tokenizer)
    if not args.skip_cache:
        for kind in ("frozen", "cached"):
            set_seed(args.seed)
            model = MultiEncoderForSequenceClassification.from_encoders(members, fusion="dme", num_labels=2)
            freeze_encoders(model, list(range(len(members))))
            add(Entry(f"{kind}/dme", kind, members, "dme"), model, tokenizer, cache=kind == "cached")

    # timed training windows, interleaved: A B C ... then ... C B A, so that a drift of the machine's speed during the
    # run hits every contestant alike; the ratios come from windows of the same round
    for round_ in range(-args.warmup_rounds, args.repeats):
        for entry in (entries if round_ % 2 == 0 else entries[::-1]):
            trainer = train_window(args, entry, workdir)
            if round_ < 0:  # an untimed round: every contestant meets its kernels and shapes once
                entry.windows.pop()
            del trainer
            cleanup()
        if round_ < 0:
            print(f"[bench] untimed warm-up round done ({time.perf_counter() - started:.0f}s elapsed)", flush=True)
            continue
        print(f"[bench] round {round_ + 1}/{args.repeats}: " + ", ".join(
            f"{e.name} {e.windows[-1]['samples_per_second']:.1f}/s" for e in entries)
            + f" ({time.perf_counter() - started:.0f}s elapsed)", flush=True)
    for entry in entries:
        finish_train_result(args, entry)

    # inference: the evaluation loop and pipeline, once per contestant that predicts
    for entry in entries:
        if entry.kind in ("frozen", "cached"):
            continue
        trainer = Trainer(model=entry.model, args=training_arguments(args, os.path.join(workdir, "eval"),
                                                                     entry.kind != "plain", 1),
                          processing_class=entry.tokenizer, data_collator=entry.collator)
        evaluate_and_time(args, entry, trainer, tokenize_task(dev_raw, spec, entry.tokenizer, args.max_seq_length),
                          entry.collator)
        pipeline_and_time(args, entry, entry.model, entry.tokenizer, texts)
        del trainer
        cleanup()
    for entry in entries:
        entry.model = entry.tokenizer = entry.train_ds = entry.collator = None
    cleanup()

    results = summarize(args, entries, device, versions, source, len(train_raw), len(dev_raw))
    results["load_average"] = {"before": load_before,
                               "after": os.getloadavg() if hasattr(os, "getloadavg") else None}
    results["total_seconds"] = time.perf_counter() - started
    return results


def _ratio(a, b) -> float:
    return float(a) / float(b) if a and b else float("nan")


def summarize(args, entries: list[Entry], device, versions, source, n_train, n_dev) -> dict:
    by_name = {e.name: e for e in entries}
    members = next(e.members for e in entries if e.kind == "fused")
    names = [short_name(e.members[0]) for e in entries if e.kind == "plain"]
    step_ms = {e.name: e.result["train"]["step_ms"] for e in entries}
    eval_sps = {e.name: e.result["eval"]["samples_per_second"] for e in entries if "eval" in e.result}

    # training ratios from the windows of the same round (neighbours in time), then their median and spread
    sps = {e.name: [w["samples_per_second"] for w in e.windows] for e in entries}

    def per_round(fn) -> dict:
        return round_summary([fn({name: v[r] for name, v in sps.items()}) for r in range(args.repeats)])

    plugin_rounds = {n: per_round(lambda x, n=n: x[f"plugin/{n}"] / x[f"plain/{n}"]) for n in names}
    ratios = {
        "plugin_over_plain": min(plugin_rounds.values(), key=lambda r: r["median"]),
        "fused_over_sum": per_round(lambda x: (1 / x["fused/dme"]) / sum(1 / x[f"plain/{n}"] for n in names)),
        "fused_over_slowest_plain": per_round(lambda x: x["fused/dme"] / min(x[f"plain/{n}"] for n in names)),
    }
    if "cached/dme" in by_name:
        ratios["cached_over_uncached"] = per_round(lambda x: x["frozen/dme"] / x["cached/dme"])
    plugin_over_plain_eval = {n: _ratio(eval_sps[f"plugin/{n}"], eval_sps[f"plain/{n}"]) for n in names}
    slowest_plain_eval = min(eval_sps[f"plain/{n}"] for n in names)
    results = {
        "device": device,
        "plugin_over_plain": ratios["plugin_over_plain"]["median"],
        "plugin_over_plain_per_member": {n: r["median"] for n, r in plugin_rounds.items()},
        "fused_over_sum": ratios["fused_over_sum"]["median"],
        "fused_over_slowest_plain": ratios["fused_over_slowest_plain"]["median"],
        "cached_over_uncached": float("nan"),
        "spread": {**ratios, "plugin_over_plain_per_member": plugin_rounds,
                   "note": f"each ratio computed in each of {args.repeats} interleaved rounds (A B C ... / ... C B A);"
                           " the headline value is their median"},
        "inference": {
            "plugin_over_plain_per_member": plugin_over_plain_eval,
            "plugin_over_plain": min(plugin_over_plain_eval.values()),
            "fused_over_sum": _ratio(1 / eval_sps["fused/dme"], sum(1 / eval_sps[f"plain/{n}"] for n in names)),
            "fused_over_slowest_plain": _ratio(eval_sps["fused/dme"], slowest_plain_eval),
        },
    }
    med = {e.name: e.result["train"]["step_ms_median"] for e in entries}
    per_member = {n: _ratio(med[f"plain/{n}"], med[f"plugin/{n}"]) for n in names}
    results["from_median_step"] = {  # the same training ratios from median step times (robust to load spikes)
        "plugin_over_plain": min(per_member.values()),
        "plugin_over_plain_per_member": per_member,
        "fused_over_sum": _ratio(med["fused/dme"], sum(med[f"plain/{n}"] for n in names)),
        "fused_over_slowest_plain": _ratio(max(med[f"plain/{n}"] for n in names), med["fused/dme"]),
        "cached_over_uncached": _ratio(med.get("cached/dme"), med.get("frozen/dme")),
    }
    if "cached/dme" in by_name:
        cached = by_name["cached/dme"]
        steps_per_epoch = math.ceil(n_train / args.batch_size)
        epoch_cached = step_ms["cached/dme"] * steps_per_epoch / 1000
        epoch_frozen = step_ms["frozen/dme"] * steps_per_epoch / 1000
        build = cached.result["cache_build"]["seconds"]
        results["cached_over_uncached"] = ratios["cached_over_uncached"]["median"]  # epoch time, cached / not
        results["feature_cache"] = {
            "epoch_seconds_cached": epoch_cached,
            "epoch_seconds_uncached": epoch_frozen,
            "epoch_examples": n_train,
            "cache_build_seconds": build,
            "first_epoch_with_build_over_uncached": _ratio(epoch_cached + build, epoch_frozen),
            "note": "epoch = one pass over the benchmark's training subset; both models have every member frozen",
        }
    for e in entries:
        if e.kind != "plain" and e.result.get("pipeline", {}).get(f"batch_{args.batch_size}", {}).get("error"):
            results.setdefault("notes", []).append(
                f"{e.name}: pipeline(batch_size={args.batch_size}) failed: "
                f"{e.result['pipeline'][f'batch_{args.batch_size}']['error']}")
    settings = {k: v for k, v in dataclasses.asdict(args).items()}
    settings.update({"data": source, "train_examples": n_train, "eval_examples": n_dev,
                     "members": list(args.members) if not args.tiny else [short_name(m) for m in members],
                     "threads": torch.get_num_threads(), "optimizer": "Trainer default (AdamW), lr 2e-5",
                     "padding": "dynamic (each batch to its longest, per member)"})
    results.update({"settings": settings, "versions": versions,
                    "runs": {e.name: {"kind": e.kind, "members": [short_name(m) for m in e.members],
                                      "fusion": e.fusion, **e.result} for e in entries}})
    return results


# ---- report ---------------------------------------------------------------------------------------------------------
def _fmt(value, digits=1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}f}"


def markdown(results: dict) -> str:
    s, v = results["settings"], results["versions"]
    lines = [
        f"# Training / inference benchmark: {s['task']} ({'bf16' if s['bf16'] else 'fp32'})",
        "",
        f"- device: {results['device']}",
        f"- versions: torch {v['torch']}, transformers {v['transformers']}, datasets {v['datasets']}, "
        f"hf_multiencoder {v['hf_multiencoder']} ({v.get('git_commit') or 'no git'}), python {v['python']}",
        f"- members: {', '.join(s['members'])}"
        + (" (built from their configs with random weights: speed does not depend on the values)"
           if s.get("random_weights") else ""),
        f"- data: {s['data']} ({s['train_examples']} train examples, {s['eval_examples']} dev examples); batch "
        f"{s['batch_size']}, max_seq_length {s['max_seq_length']}, dynamic padding"
        + (f" to a multiple of {s['pad_to_multiple_of']}" if s["pad_to_multiple_of"] else "")
        + f"; {s['steps']} timed steps after {s['warmup']} warm-up steps"
        + (f"; {s['warmup_rounds']} untimed round(s) of every contestant first" if s.get("warmup_rounds") else "")
        + ("; torch_compile" if s["torch_compile"] else "") + ("; group_by_length" if s["group_by_length"] else ""),
        f"- load average before/after: {results.get('load_average', {}).get('before')} / "
        f"{results.get('load_average', {}).get('after')}",
        "",
        "| run | fusion | train samples/s | step ms (mean / median) | train peak MB | collate ms | eval samples/s | "
        "pipeline bs1 /s | pipeline batched /s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results["runs"].items():
        train = r["train"]
        pipe = r.get("pipeline", {})
        batched = next((x for k, x in pipe.items() if k != "batch_1"), {})
        lines.append(
            f"| {name} | {r['fusion'] or '-'} | {_fmt(train['samples_per_second'])} | "
            f"{_fmt(train['step_ms'], 0)} / {_fmt(train['step_ms_median'], 0)} | "
            f"{_fmt(train['memory']['peak_mb'], 0)} | {_fmt(r.get('collate_ms_per_batch'), 2)} | "
            f"{_fmt(r.get('eval', {}).get('samples_per_second'))} | "
            f"{_fmt(pipe.get('batch_1', {}).get('samples_per_second'))} | "
            f"{'fails' if 'error' in batched else _fmt(batched.get('samples_per_second'))} |")
    inf = results["inference"]
    med = results["from_median_step"]
    spread = results["spread"]

    def row(label, key, per_member=None):
        r = spread["plugin_over_plain_per_member"][per_member] if per_member else spread.get(key)
        value = r["median"] if r else float("nan")
        rng = f"{_fmt(r['min'], 3)} - {_fmt(r['max'], 3)}" if r else "-"
        m = med["plugin_over_plain_per_member"][per_member] if per_member else med.get(key)
        i = inf["plugin_over_plain_per_member"][per_member] if per_member else inf.get(key)
        return f"| {label} | {_fmt(value, 3)} | {rng} | {_fmt(m, 3)} | {_fmt(i, 3) if i is not None else '-'} |"

    lines += [
        "",
        f"Training ratios: computed in each of {s['repeats']} interleaved rounds (the contestants take turns, the "
        f"order reversed every round), then the median, with the rounds' range.",
        "",
        "| ratio | training (median of rounds) | rounds' range | training (median steps) | inference (eval loop) |",
        "|---|---|---|---|---|",
        row("plugin_over_plain (min; throughput, 1-member plugin / plain member)", "plugin_over_plain"),
        *[row(f"plugin_over_plain[{member}]", None, per_member=member)
          for member in results["plugin_over_plain_per_member"]],
        row("fused_over_sum (step time, fused dme / sum of plain members)", "fused_over_sum"),
        row("fused_over_slowest_plain (throughput, fused dme / slowest plain member)", "fused_over_slowest_plain"),
        row("cached_over_uncached (epoch time, all members frozen, cached / not)", "cached_over_uncached"),
    ]
    if "feature_cache" in results:
        fc = results["feature_cache"]
        lines.append(f"\nFeature cache: building it took {_fmt(fc['cache_build_seconds'], 2)} s for "
                     f"{fc['epoch_examples']} examples; an epoch takes {_fmt(fc['epoch_seconds_cached'], 2)} s cached "
                     f"vs {_fmt(fc['epoch_seconds_uncached'], 2)} s uncached (first epoch incl. build: "
                     f"{_fmt(fc['first_epoch_with_build_over_uncached'], 3)} x).")
    for note in results.get("notes", []):
        lines.append(f"\nNote: {note}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = HfArgumentParser(BenchmarkArguments)
    (args,) = parser.parse_args_into_dataclasses(args=argv)
    results = run(args)
    save_results(results, args.out, markdown(results))
    print(f"[bench] wrote {args.out} and {os.path.splitext(args.out)[0]}.md")
    return results


if __name__ == "__main__":
    main()
