"""What distillation buys at inference: the fused teacher against the plain student, CPU latency and throughput.

    python benchmarks/bench_distill.py --teacher FOLDER [--student sentence-transformers/all-MiniLM-L6-v2]
        [--task cola] [--threads 1] [--out results/bench_distill.json]
    python benchmarks/bench_distill.py --tiny        # tiny random members: a smoke test in seconds

The teacher is a saved multi-encoder classifier (e.g. the one `scripts/distill_study.py` teaches from); the student is
the plain `AutoModelForSequenceClassification` of `--student` with the teacher's number of labels (its weights do not
change its speed, so the checkpoint itself stands in for any student distilled from it, and for the member fine-tuned
alone). Inputs are the task's dev texts (sentence pairs for a pair task), tokenized beforehand: batch 1 is a
median-length text, batch 32 the first 32; each model runs in turn (the order reversed every round) and the median is
reported, PyTorch eager fp32. Tokenizing is timed apart. Writes the JSON and a Markdown table beside it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch
import transformers
from harness import REPO_ROOT, benchmark_main, environment, start_run
from timing import cleanup, interleaved_median_ms
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from hf_multiencoder import MultiEncoderForSequenceClassification, MultiEncoderTokenizer
from hf_multiencoder.data.loading import load_task
from hf_multiencoder.data.tasks import get_task
from hf_multiencoder.testing_utils import build_tiny_encoders
from hf_multiencoder.training.protocol import REAL_MEMBERS


@dataclass
class DistillBenchmarkArguments:
    teacher: str | None = field(default=None, metadata={"help": "Folder of a trained multi-encoder classifier."})
    student: str = field(default=REAL_MEMBERS["MiniLM"],
                         metadata={"help": "The student's checkpoint (or a distilled student's folder)."})
    tiny: bool = field(default=False, metadata={"help": "Tiny random members as teacher and student (smoke test)."})
    task: str = field(default="cola",
                      metadata={"help": "A sequence task of the registry (its dev texts; pairs for a pair task)."})
    data_dir: str | None = field(default=None, metadata={"help": "The data folder (default: ../shared/data)."})
    max_seq_length: int = field(default=128, metadata={"help": "Truncation length."})
    batch_size: int = field(default=32, metadata={"help": "Batch of the throughput runs."})
    latency_repeats: int = field(default=20, metadata={"help": "Timed batch-1 rounds (the median is reported)."})
    throughput_repeats: int = field(default=5, metadata={"help": "Timed batch-32 rounds (the median is reported)."})
    threads: int = field(default=1, metadata={"help": "PyTorch threads."})
    out: str | None = field(default=None, metadata={
        "help": "JSON result path (default results/bench_distill[_tiny].json); .md next to it."})
    device: str = field(default="cpu", metadata={"help": "cpu (the latency a CPU deployment sees)."})

    def __post_init__(self):
        if self.device != "cpu":
            raise ValueError("The distillation benchmark measures CPU inference; --device must be cpu.")
        if self.teacher is None and not self.tiny:
            raise ValueError("Give --teacher FOLDER (a trained multi-encoder classifier), or --tiny.")
        if self.teacher is not None and not os.path.isfile(os.path.join(self.teacher, "config.json")):
            raise ValueError(f"--teacher {self.teacher}: no saved model there (config.json missing).")
        spec = get_task(self.task)
        if spec.kind != "sequence":
            raise ValueError(f"The benchmark times sentence classifiers; {spec.name} is a {spec.kind} task.")
        self.task = spec.name
        if min(self.batch_size, self.latency_repeats, self.throughput_repeats, self.threads) < 1:
            raise ValueError("`batch_size`, the repeats and `threads` must be positive.")
        if self.tiny:
            self.max_seq_length = min(self.max_seq_length, 60)  # the tiny members have 64 positions
        if self.out is None:
            self.out = os.path.join(REPO_ROOT, "results", "bench_distill" + ("_tiny" if self.tiny else "") + ".json")


def load_models(args, workdir: str):
    if args.tiny:
        members = build_tiny_encoders(os.path.join(workdir, "tiny"))[:2]
        teacher = MultiEncoderForSequenceClassification.from_encoders(members, fusion="dme", num_labels=2)
        tokenizer = MultiEncoderTokenizer.from_encoders(members)
        return teacher, tokenizer, members[0]
    teacher = MultiEncoderForSequenceClassification.from_pretrained(args.teacher)
    return teacher, MultiEncoderTokenizer.from_pretrained(args.teacher), args.student


def run(args: DistillBenchmarkArguments) -> dict:
    workdir = start_run(args, "bench_distill_")
    teacher, teacher_tokenizer, student_name = load_models(args, workdir)
    teacher.eval()
    student = AutoModelForSequenceClassification.from_pretrained(
        student_name, num_labels=teacher.config.num_labels, dtype=torch.float32).eval()
    student_tokenizer = AutoTokenizer.from_pretrained(student_name)
    raw, spec = load_task(args.task, data_dir=args.data_dir)
    dev = raw[spec.validation_splits[0]]
    texts = list(dev["sentence1"])
    pairs = list(dev["sentence2"]) if spec.is_pair else None
    lengths = teacher.base_model.member_max_lengths(args.max_seq_length)

    def encode_teacher(rows):
        return teacher_tokenizer([texts[i] for i in rows], text_pair=[pairs[i] for i in rows] if pairs else None,
                                 padding=True, truncation=True, max_length=lengths, return_tensors="pt")

    def encode_student(rows):
        return student_tokenizer([texts[i] for i in rows], [pairs[i] for i in rows] if pairs else None,
                                 padding=True, truncation=True, max_length=args.max_seq_length, return_tensors="pt")

    order = sorted(range(len(texts)), key=lambda i: len(texts[i]) + (len(pairs[i]) if pairs else 0))
    timing = {}
    for label, rows, repeats in (("batch_1", [order[len(order) // 2]], args.latency_repeats),
                                 (f"batch_{args.batch_size}", list(range(min(args.batch_size, len(texts)))),
                                  args.throughput_repeats)):
        t_in, s_in = encode_teacher(rows), encode_student(rows)
        contestants = {
            "teacher": torch.inference_mode()(lambda b=t_in: teacher(**b)),
            "student": torch.inference_mode()(lambda b=s_in: student(**b)),
            "teacher_tokenize": lambda r=rows: encode_teacher(r),
            "student_tokenize": lambda r=rows: encode_student(r),
        }
        ms = interleaved_median_ms(contestants, repeats=repeats, device="cpu", warmup=1)
        timing[label] = {
            "batch_size": len(rows), "repeats": repeats, "ms": ms,
            "examples_per_second": {k: len(rows) / v * 1000 for k, v in ms.items()},
            "teacher_over_student": ms["teacher"] / ms["student"],
            "tokens": {"teacher_members": [int(t_in[f"input_ids_{i}"].shape[1]) if f"input_ids_{i}" in t_in else None
                                           for i in range(len(lengths))],
                       "student": int(s_in["input_ids"].shape[1])},
        }
    device_name, versions = environment(args)
    results = {
        "timing": timing,
        "parameters_millions": {"teacher": teacher.num_parameters() / 1e6, "student": student.num_parameters() / 1e6},
        "device": device_name,
        "versions": versions,
        "settings": {"teacher": "tiny" if args.tiny else os.path.relpath(os.path.abspath(args.teacher), REPO_ROOT),
                     "teacher_members": list(teacher.config.encoder_names), "teacher_fusion": teacher.config.fusion,
                     "student": "tiny" if args.tiny else args.student, "task": spec.name, "dev_texts": len(texts),
                     "max_seq_length": args.max_seq_length, "threads": args.threads, "tiny": args.tiny,
                     "load_average": os.getloadavg(), "engine": "PyTorch eager fp32"},
    }
    cleanup()
    return results


def markdown(results: dict) -> str:
    s = results["settings"]
    lines = [f"Teacher ({' + '.join(s['teacher_members'])}, {s['teacher_fusion']}) against the plain student "
             f"({s['student']}) on {results['device']}; {s['engine']}, {s['task']} dev texts tokenized "
             f"beforehand, median of interleaved rounds.", "",
             "| batch | teacher ms | student ms | teacher / student | teacher ex/s | student ex/s | tokenize ms "
             "(teacher / student) |", "|---|---|---|---|---|---|---|"]
    for t in results["timing"].values():
        ms, eps = t["ms"], t["examples_per_second"]
        lines.append(f"| {t['batch_size']} | {ms['teacher']:.1f} | {ms['student']:.1f} | "
                     f"{t['teacher_over_student']:.2f}x | {eps['teacher']:.1f} | {eps['student']:.1f} | "
                     f"{ms['teacher_tokenize']:.2f} / {ms['student_tokenize']:.2f} |")
    p = results["parameters_millions"]
    lines += ["", f"Parameters: teacher {p['teacher']:.1f}M, student {p['student']:.1f}M."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    return benchmark_main(DistillBenchmarkArguments, run, markdown, argv)


if __name__ == "__main__":
    transformers.logging.disable_progress_bar()
    main()
