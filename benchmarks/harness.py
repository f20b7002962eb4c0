"""The shared machinery of the training benchmarks (bench_train.py, bench_scale.py, bench_encode.py,
profile_forward.py): their settings (`BenchmarkArguments`), data, the timed Trainer window, the environment record.

A helper module of benchmarks/, not a script: the benchmark scripts import it, as they import `timing`.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import random
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

import datasets
import torch
import transformers
from timing import PeakMemory, StepTimer, synchronize
from transformers import (
    AutoConfig,
    AutoModel,
    AutoTokenizer,
    HfArgumentParser,
    PrinterCallback,
    Trainer,
    TrainingArguments,
    pipeline,
)

import hf_multiencoder
from hf_multiencoder import (
    get_task,
    load_task,
)
from hf_multiencoder.data.loading import length_grouping_kwargs, local_path
from hf_multiencoder.models.precision_multiencoder import cpu_model
from hf_multiencoder.testing_utils import build_tiny_encoders
from hf_multiencoder.training.protocol import REAL_MEMBERS

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MEMBERS = list(REAL_MEMBERS.values())
SYNTHETIC_WORDS = ("the a cat dog sat on mat he she can will go went left somebody just new york john smith paris "
                   "is was in of and to it likes runs quickly").split()


@dataclass
class BenchmarkArguments:
    members: list[str] = field(default_factory=lambda: list(DEFAULT_MEMBERS),
                               metadata={"help": "Member checkpoints (names or folders AutoModel accepts)."})
    tiny: bool = field(default=False, metadata={"help": "Tiny random members (a smoke test in seconds)."})
    random_weights: bool = field(default=False, metadata={
        "help": "Build each member from its folder's config and tokenizer with random weights (speed does not depend "
                "on the weights' values; the folders need no weights file)."})
    synthetic: bool = field(default=False, metadata={"help": "Generated sentences instead of --data_dir."})
    task: str = field(default="cola", metadata={"help": "A registered sentence-level task (cola, sst2, rte, ...)."})
    long: bool = field(default=False, metadata={"help": "Long inputs: RTE sentence pairs at max_seq_length 256."})
    data_dir: str | None = field(default=None, metadata={
        "help": "The data folder (default $HF_MULTIENCODER_DATA, else ../shared/data next to the repository)."})
    device: str | None = field(default=None, metadata={"help": "cpu or cuda (default: cuda when available)."})
    bf16: bool = field(default=False, metadata={"help": "bf16 mixed precision (Trainer's --bf16)."})
    batch_size: int = field(default=32, metadata={"help": "Per-device batch size, training and evaluation."})
    max_seq_length: int | None = field(default=None, metadata={"help": "Truncation length (128; 256 with --long)."})
    pad_to_multiple_of: int | None = field(default=None, metadata={"help": "Pad each batch to a multiple of this."})
    steps: int | None = field(default=None, metadata={"help": "Timed training steps (CPU 10, CUDA 50, tiny 4)."})
    warmup: int | None = field(default=None, metadata={"help": "Untimed warm-up steps (CPU 2, CUDA 10, tiny 1)."})
    eval_samples: int | None = field(default=None, metadata={"help": "Dev examples evaluated (CPU 512, CUDA all)."})
    pipeline_samples: int | None = field(default=None, metadata={"help": "Sentences through pipeline (CPU 32)."})
    fusions: list[str] = field(default_factory=lambda: ["concat", "dme"],
                               metadata={"help": "Fusions of the all-member model; `dme` is the one compared."})
    single_fusion: str = field(default="dme", metadata={"help": "Fusion of the one-member plugin model."})
    torch_compile: bool = field(default=False, metadata={"help": "Trainer's --torch_compile for every model."})
    group_by_length: bool = field(default=False, metadata={"help": "Group training batches by length."})
    threads: int | None = field(default=None, metadata={"help": "torch.set_num_threads (CPU)."})
    skip_pipeline: bool = field(default=False, metadata={"help": "Do not time pipeline()."})
    skip_cache: bool = field(default=False, metadata={"help": "Do not time the frozen / feature-cache runs."})
    seed: int = field(default=42, metadata={"help": "Seed for the data subset and the models."})
    warmup_rounds: int | None = field(default=None, metadata={
        "help": "Untimed rounds of every contestant before the timed ones (CUDA 1: the first window on a GPU meets "
                "lazily loaded kernels and new padded lengths; CPU 0)."})
    repeats: int | None = field(default=None, metadata={
        "help": "Timed training windows per contestant, interleaved A B C ... C B A ... (CPU 4, CUDA 3, tiny 2)."})
    out: str | None = field(default=None, metadata={
        "help": "JSON result path (default benchmarks/results/<device>[_bf16][_tiny].json); .md next to it."})

    def __post_init__(self):
        if self.long:
            self.task = "rte"
            self.max_seq_length = self.max_seq_length or 256
        spec = get_task(self.task)
        if spec.kind != "sequence" or spec.is_regression or spec.num_labels != 2:
            raise ValueError(f"The benchmark times binary sentence(-pair) classification; {spec.name} is not.")
        self.task = spec.name
        if self.device is None:
            self.device = "cuda" if torch.cuda.is_available() else "cpu"
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"`device` must be 'cpu' or 'cuda', got {self.device!r}.")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("--device cuda but torch sees no CUDA device.")
        if "dme" not in self.fusions:
            raise ValueError("`fusions` must include dme (the fused model the ratios compare).")
        if self.max_seq_length is None:
            self.max_seq_length = 128
        if self.tiny:
            self.max_seq_length = min(self.max_seq_length, 60)  # the tiny members have 64 positions
        on_cuda = self.device == "cuda"
        defaults = (4, 1, 64, 8, 2) if self.tiny else ((50, 10, None, 256, 3) if on_cuda else (10, 2, 512, 32, 4))
        self.steps = self.steps or defaults[0]
        self.warmup = defaults[1] if self.warmup is None else self.warmup
        self.eval_samples = self.eval_samples or defaults[2]
        self.pipeline_samples = defaults[3] if self.pipeline_samples is None else self.pipeline_samples
        self.repeats = self.repeats or defaults[4]
        if self.warmup_rounds is None:
            self.warmup_rounds = 1 if on_cuda and not self.tiny else 0
        if self.steps < 1 or self.warmup < 1:
            raise ValueError("`steps` and `warmup` must be at least 1 (the clock starts at the end of the warm-up).")
        if self.out is None:
            name = self.device + ("_bf16" if self.bf16 else "") + ("_long" if self.long else "") + (
                "_tiny" if self.tiny else "")
            self.out = os.path.join(REPO_ROOT, "benchmarks", "results", f"{name}.json")


# ---- data -----------------------------------------------------------------------------------------------------------
def synthetic_split(text_keys, n: int, seed: int) -> dict[str, list]:
    rng = random.Random(seed)
    columns = {k: [" ".join(rng.choices(SYNTHETIC_WORDS, k=rng.randint(3, 25))) for _ in range(n)]
               for k in text_keys}
    columns["label"] = [rng.randint(0, 1) for _ in range(n)]
    return columns


def load_splits(args: BenchmarkArguments) -> tuple[datasets.Dataset, datasets.Dataset, str]:
    """A shuffled training subset of (warmup + steps) batches and the first `eval_samples` dev examples."""
    n_train = (args.warmup + args.steps) * args.batch_size
    spec = get_task(args.task)
    try:
        raw, _ = load_task(spec, data_dir=args.data_dir, from_hub=False) if not args.synthetic else (None, None)
    except FileNotFoundError:
        if not args.tiny:
            raise
        raw = None  # the smoke test runs anywhere
    if raw is None:
        train = datasets.Dataset.from_dict(synthetic_split(spec.text_keys, n_train, args.seed))
        dev = datasets.Dataset.from_dict(synthetic_split(spec.text_keys, args.eval_samples or 256, args.seed + 1))
        source = "synthetic"
    else:
        # relative to the repository: committed results name no absolute path of the machine they ran on
        source = os.path.relpath(local_path(spec, args.data_dir), REPO_ROOT)
        train, dev = raw["train"], raw[spec.validation_splits[0]]
    train = train.shuffle(seed=args.seed)
    train = train.select([i % len(train) for i in range(n_train)])  # repeats only if the set is smaller
    if args.eval_samples:
        dev = dev.select(range(min(args.eval_samples, len(dev))))
    return train, dev, source


def text_inputs(ds: datasets.Dataset, text_keys, n: int) -> list:
    rows = ds.select(range(min(n, len(ds))))
    if len(text_keys) == 1:
        return list(rows[text_keys[0]])
    return [{"text": a, "text_pair": b} for a, b in zip(rows[text_keys[0]], rows[text_keys[1]])]


def training_arguments(args: BenchmarkArguments, output_dir: str, multi: bool, max_steps: int) -> TrainingArguments:
    kwargs = {
        "output_dir": output_dir, "per_device_train_batch_size": args.batch_size,
        "per_device_eval_batch_size": args.batch_size, "max_steps": max_steps, "learning_rate": 2e-5,
        "report_to": [], "save_strategy": "no", "logging_strategy": "no", "eval_strategy": "no",
        "disable_tqdm": True, "seed": args.seed, "bf16": args.bf16, "use_cpu": args.device == "cpu",
        "torch_compile": args.torch_compile, "dataloader_num_workers": 0,
    }
    if args.group_by_length:
        kwargs.update(length_grouping_kwargs(multi_encoder=multi))
    return TrainingArguments(**kwargs)


# ---- one benchmark entry --------------------------------------------------------------------------------------------
@dataclass
class Entry:
    name: str
    kind: str  # plain | plugin | fused | frozen | cached
    members: list[str]
    fusion: str | None = None
    result: dict = field(default_factory=dict)
    # what the timed windows need, kept for the whole run (the contestants take turns)
    model: object = None
    tokenizer: object = None
    train_ds: object = None
    collator: object = None
    windows: list[dict] = field(default_factory=list)


def train_window(args, entry: Entry, workdir) -> Trainer:
    """One timed window: a fresh Trainer (and optimizer) on the contestant's model, `warmup` untimed steps, then
    `steps` timed ones. Appends the window's figures to `entry.windows`."""
    timer = StepTimer(args.warmup, args.steps, args.device)
    targs = training_arguments(args, os.path.join(workdir, entry.name.replace("/", "_")), entry.kind != "plain",
                               args.warmup + args.steps)
    trainer = Trainer(model=entry.model, args=targs, train_dataset=entry.train_ds, processing_class=entry.tokenizer,
                      data_collator=entry.collator, callbacks=[timer])
    trainer.remove_callback(PrinterCallback)  # keep the console to our own lines
    with PeakMemory(args.device) as mem:
        trainer.train()
    step_ms = [(b - a) * 1000 for a, b in zip(timer.step_ends[args.warmup - 1:], timer.step_ends[args.warmup:])]
    entry.windows.append({"samples_per_second": args.steps * args.batch_size / timer.seconds,
                          "step_ms": timer.seconds / args.steps * 1000, "step_ms_each": step_ms,
                          "peak_mb": mem.result["peak_mb"], "memory": mem.result})
    return trainer


def finish_train_result(args, entry: Entry) -> None:
    """The windows' figures as the entry's training result: medians over windows, and their spread."""
    windows = entry.windows
    sps = [w["samples_per_second"] for w in windows]
    entry.result["train"] = {
        "samples_per_second": statistics.median(sps),
        "samples_per_second_windows": sps,
        "step_ms": statistics.median(w["step_ms"] for w in windows),
        "step_ms_median": statistics.median(ms for w in windows for ms in w["step_ms_each"]),
        "timed_steps": args.steps,
        "warmup_steps": args.warmup,
        "windows": len(windows),
        "memory": max((w["memory"] for w in windows), key=lambda m: m["peak_mb"]),
        "trainable_parameters": sum(p.numel() for p in entry.model.parameters() if p.requires_grad),
        "parameters": sum(p.numel() for p in entry.model.parameters()),
    }


def evaluate_and_time(args, entry: Entry, trainer: Trainer, eval_ds, collator) -> None:
    trainer.data_collator = collator  # the multi-encoder collators leave the `length` column out themselves
    # warm-up (allocator, kernels, compile): one batch on the CPU; on CUDA the whole set, since every new padded
    # length meets new kernels and the first pass in a process also loads them
    warm = eval_ds if args.device == "cuda" else eval_ds.select(range(min(len(eval_ds), args.batch_size)))
    trainer.evaluate(eval_dataset=warm)
    with PeakMemory(args.device) as mem:
        synchronize(args.device)
        start = time.perf_counter()
        trainer.evaluate(eval_dataset=eval_ds)
        synchronize(args.device)
        seconds = time.perf_counter() - start
    entry.result["eval"] = {"samples_per_second": len(eval_ds) / seconds, "samples": len(eval_ds),
                            "seconds": seconds, "memory": mem.result}


def pipeline_and_time(args, entry: Entry, model, tokenizer, texts: list) -> None:
    if args.skip_pipeline or not texts:
        return
    model.eval()
    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    classifier = pipeline("text-classification", model=model, tokenizer=tokenizer, device=device)
    autocast = torch.autocast(args.device, dtype=torch.bfloat16) if args.bf16 else contextlib.nullcontext()
    result = {}
    for label, batch_size in (("batch_1", 1), (f"batch_{args.batch_size}", args.batch_size)):
        kwargs = {"batch_size": batch_size, "truncation": True, "max_length": args.max_seq_length}
        try:
            with autocast, torch.inference_mode():
                classifier(texts[:2], **kwargs)  # warm-up
                synchronize(args.device)
                start = time.perf_counter()
                classifier(texts, **kwargs)
                synchronize(args.device)
            seconds = time.perf_counter() - start
            result[label] = {"samples_per_second": len(texts) / seconds, "samples": len(texts), "seconds": seconds}
        except Exception as e:  # noqa: BLE001 - recorded: the plugin's known pipeline limits belong in the report
            result[label] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    entry.result["pipeline"] = result


# ---- the run --------------------------------------------------------------------------------------------------------
def build_tiny_members(root: str) -> list[str]:
    return build_tiny_encoders(root)[:2]  # BERT-32 and RoBERTa-40: two types, two tokenizers, two widths


def build_random_members(members: list[str], root: str, seed: int) -> list[str]:
    """Each member rebuilt from its config with random weights and saved (with its tokenizer) under `root`, keeping
    the folder's name. For speed measurements where only the architecture matters."""
    built = []
    for member in members:
        out = os.path.join(root, short_name(member))
        torch.manual_seed(seed)
        AutoModel.from_config(AutoConfig.from_pretrained(member)).save_pretrained(out)
        AutoTokenizer.from_pretrained(member).save_pretrained(out)
        built.append(out)
    return built


def short_name(member: str) -> str:
    return os.path.basename(member.rstrip("/"))


def environment(args: BenchmarkArguments) -> tuple[str, dict]:
    if args.device == "cuda":
        props = torch.cuda.get_device_properties(0)
        device = f"cuda: {props.name} ({props.total_memory / 2**30:.0f} GiB)"
    else:
        device = f"cpu: {cpu_model()}, {torch.get_num_threads()} threads"
    versions = {
        "python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
        "datasets": datasets.__version__, "hf_multiencoder": hf_multiencoder.__version__, "git_commit": git_commit(),
        "cuda": torch.version.cuda if args.device == "cuda" else None, "platform": platform.platform(),
    }
    with contextlib.suppress(ImportError):
        import accelerate

        versions["accelerate"] = accelerate.__version__
    return device, versions


def start_run(args: BenchmarkArguments, prefix: str) -> str:
    """A benchmark's set-up: `--threads`, no progress bars or library logs; returns a fresh work folder."""
    if args.threads:
        torch.set_num_threads(args.threads)
    datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()
    return tempfile.mkdtemp(prefix=prefix)


def git_commit() -> str | None:
    """The checkout's short commit hash (None outside a git checkout)."""
    with contextlib.suppress(Exception):
        return subprocess.run(["git", "-C", REPO_ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip() or None
    return None


def benchmark_main(arguments_class, run, markdown, argv: list[str] | None = None) -> dict:
    """A benchmark script's `main`: parse `arguments_class` (a dataclass with an `out` path) from `argv`, `run` it,
    save the JSON and the `markdown` table beside it, and return the results."""
    (args,) = HfArgumentParser(arguments_class).parse_args_into_dataclasses(args=argv)
    results = run(args)
    save_results(results, args.out, markdown(results))
    return results


def save_results(results: dict, out: str, table: str) -> None:
    """Write a benchmark's `results` to `out` (JSON) and its Markdown `table` beside it (same name, `.md`), and print
    the table."""
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=2, default=str)
    with open(os.path.splitext(out)[0] + ".md", "w") as f:
        f.write(table)
    print(table, flush=True)
