"""Model cards for multi-encoders, built the way setfit builds its cards (setfit: src/setfit/model_card.py).

[`MultiEncoderModelCardData`] holds what the card says; [`ModelCardCallback`] fills it during training (members,
per-member learning rates, evaluation results, mean fusion weights); [`generate_model_card`] renders it through
`huggingface_hub.ModelCard` from [`MODEL_CARD_TEMPLATE`]; [`save_model_card`] writes `README.md` and the fusion-weight
plot into a folder. Rendering starts from the data every time, so rebuilding a card never duplicates a section.

Training-side code: not shipped with the weights (the remote-code closure imports only torch and transformers).
"""

from __future__ import annotations

import logging
import os
import platform
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
import transformers
from huggingface_hub import CardData, ModelCard
from huggingface_hub.repocard_data import EvalResult, eval_results_to_model_index
from huggingface_hub.utils import yaml_dump
from transformers import TrainerCallback
from transformers.modelcard import make_markdown_table

from ..models.modeling_multiencoder import multiencoder_base, parameter_members
from .fast_path import describe, fast_path_choice
from .lora import is_peft_model
from .metrics import MULTITASK_SCORE, fusion_weights_from_metrics, is_fusion_weight_metric

logger = logging.getLogger(__name__)

README_NAME = "README.md"
FUSION_WEIGHTS_PLOT = "fusion_weights.png"

# Keys of the YAML header, in the order the Hub documents them; everything else only feeds the template.
YAML_FIELDS = [
    "language",
    "license",
    "library_name",
    "tags",
    "base_model",
    "datasets",
    "metrics",
    "pipeline_tag",
    "model-index",
]
# Evaluation outputs that are bookkeeping, not metrics (the Trainer's and run_glue_multi.py's).
_NOT_METRICS = {
    "loss", "runtime", "samples_per_second", "steps_per_second", "epoch", "step", "samples",
    "model_preparation_time", "num_input_tokens_seen", "total_flos", "jit_compilation_time",
}
_HUB_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[A-Za-z0-9][\w.\-]*)?$")
_ACRONYMS = {"f1": "F1", "mcc": "MCC", "auc": "AUC", "roc": "ROC"}

TASKS = {
    # pipeline tag: (Auto class, pretty task name)
    "text-classification": ("AutoModelForSequenceClassification", "Text Classification"),
    "token-classification": ("AutoModelForTokenClassification", "Token Classification"),
    "feature-extraction": ("AutoModel", "Feature Extraction"),
}
FUSIONS = {
    "concat": "the members' sentence vectors are concatenated",
    "dme": "Dynamic Meta-Embeddings (DME): each member's vector is projected to a common size and the projections "
           "are summed with weights the model computes from the vectors themselves, for every input",
    "cdme": "Contextualized Dynamic Meta-Embeddings (CDME): as DME, but a BiLSTM over each member's token states "
            "scores the members",
    "mean": "each member's vector is projected to a common size and the projections are averaged",
}

# The card's Jinja template (rendered by `huggingface_hub.ModelCard.from_template`), a file of its own. A line ending
# in a backslash continues on the next line (the two are joined, as in Python source), so the file can stay readable.
MODEL_CARD_TEMPLATE_PATH = Path(__file__).with_name("model_card_template.md")
MODEL_CARD_TEMPLATE = MODEL_CARD_TEMPLATE_PATH.read_text(encoding="utf-8").replace("\\\n", "")


def is_hub_model_id(name: str | None) -> bool:
    """Whether ``name`` reads as a model id on the Hub (``org/name`` or a canonical name), not a local folder."""
    return bool(name) and _HUB_REPO_ID.match(name) is not None and ".." not in name and not os.path.exists(name)


def pretty_metric_name(key: str) -> str:
    return " ".join(_ACRONYMS.get(part, part.capitalize()) for part in key.split("_"))


def _member_link(member: dict) -> str:
    checkpoint = member["checkpoint"]
    if is_hub_model_id(checkpoint):
        return f"[{checkpoint}](https://huggingface.co/{checkpoint})"
    return f"`{os.path.basename(os.path.normpath(checkpoint))}` (local)"


def _format_lr(value: float) -> str:
    return f"{value:g}"


def _versions() -> dict[str, str]:
    from .. import __version__

    versions = {"Python": platform.python_version(), "hf_multiencoder": __version__,
                "Transformers": transformers.__version__, "PyTorch": torch.__version__}
    for label, module in (("Datasets", "datasets"), ("Tokenizers", "tokenizers"),
                          ("huggingface_hub", "huggingface_hub")):
        try:
            versions[label] = __import__(module).__version__
        except ImportError:
            pass
    return versions


def encoder_learning_rates(model, optimizer) -> dict[str, Any]:
    """Each member's learning rate(s) and the head's, read from the optimizer's parameter groups.

    Parameters are matched to members by identity, so this works for ``create_multiencoder_optimizer`` and for the
    Trainer's default optimizer alike. Returns ``{member name: [rates], ..., "head": [rates]}`` (the rates a
    scheduler started from; several per member with layer-wise decay, none for a frozen member).
    """
    names = list(model.config.encoder_names)
    members = parameter_members(model)
    owner = {id(p): names[members[n]] for n, p in model.named_parameters() if members[n] is not None}
    rates: dict[str, set[float]] = {name: set() for name in [*names, "head"]}
    for group in optimizer.param_groups:
        lr = group.get("initial_lr", group["lr"])
        for p in group["params"]:
            rates[owner.get(id(p), "head")].add(float(lr))
    return {name: sorted(values) for name, values in rates.items()}



# The earlier name (the option is `encoder_learning_rates`: one word for one idea).
member_learning_rates = encoder_learning_rates

def plot_fusion_weights(weights: dict[str, float], path: str, split: str = "validation") -> str | None:
    """Bar chart of each member's mean fusion weight, saved as a PNG. Returns the path, or ``None`` without
    matplotlib (``pip install matplotlib``). Uses the Agg canvas directly: no pyplot, no global backend change."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        logger.warning("matplotlib is not installed: the model card will have no fusion-weight plot.")
        return None
    names, values = list(weights), [float(w) for w in weights.values()]
    fig = Figure(figsize=(1.6 + 1.2 * len(names), 3.2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    bars = ax.bar(range(len(names)), values, color="#ff9d00", edgecolor="#b36b00")
    ax.bar_label(bars, labels=[f"{v:.3f}" for v in values], padding=2, fontsize=9)
    if names:
        ax.axhline(1 / len(names), linestyle="--", linewidth=1, color="#666666", label="uniform (1 / members)")
        ax.legend(loc="upper right", fontsize=8, frameon=False)
    ax.set_xticks(range(len(names)), names, rotation=15 if max(map(len, names)) > 10 else 0, fontsize=9)
    ax.set_ylabel("mean fusion weight")
    ax.set_ylim(0, max(1.0, max(values) * 1.15) if values else 1.0)
    ax.set_title(f"Mean fusion weight per member ({split})", fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
    return path


@dataclass
class MultiEncoderModelCardData(CardData):
    """What the model card of a multi-encoder says. Give what only you know; the rest is filled by
    [`ModelCardCallback`] during training (or by the `set_*` methods).

    Args:
        language (`str` or `list[str]`, *optional*): language(s) of the training data, e.g. `"en"`.
        license (`str`, *optional*): e.g. `"apache-2.0"`.
        model_name (`str`, *optional*): a pretty name; defaults to e.g. "DME multi-encoder (MiniLM + MPNet) on CoLA".
        model_id (`str`, *optional*): the repository id on the Hub, e.g. `"user/cola-minilm-mpnet-dme"`.
        revision (`str`, *optional*): the commit the usage snippet pins (set after a push).
        dataset_name (`str`, *optional*): a pretty dataset name, e.g. `"GLUE CoLA"`.
        dataset_id (`str`, *optional*): the dataset's id on the Hub, e.g. `"nyu-mll/glue"`.
        dataset_config (`str`, *optional*): its configuration, e.g. `"cola"`.
        dataset_revision (`str`, *optional*): the dataset commit used.
        task_name (`str`, *optional*): e.g. `"linguistic acceptability"`; defaults to the pipeline task.
        eval_split (`str`, *optional*, defaults to `"validation"`): the split the next evaluation is reported under.
        base_model (`list[str]`, *optional*): defaults to the members' checkpoints that are Hub ids.
        tags (`list[str]`, *optional*): extra tags; the card always carries `hf_multiencoder`, `multiencoder`, the
            task, the fusion and `generated_from_trainer`.
    """

    language: str | list[str] | None = None
    license: str | None = None
    model_name: str | None = None
    model_id: str | None = None
    revision: str | None = None
    dataset_name: str | None = None
    dataset_id: str | None = None
    dataset_config: str | None = None
    dataset_revision: str | None = None
    task_name: str | None = None
    eval_split: str = "validation"
    base_model: list[str] | None = None
    tags: list[str] | None = None

    # Filled from the model ([`register_model`]) and during training.
    members: list[dict[str, Any]] = field(default_factory=list, init=False)
    fusion: str | None = field(default=None, init=False)
    fusion_gating: str | None = field(default=None, init=False)
    fused_size: int | None = field(default=None, init=False)
    pipeline_tag: str = field(default="text-classification", init=False)
    num_labels: int | None = field(default=None, init=False)
    labels: list[str] | None = field(default=None, init=False)
    hyperparameters: dict[str, Any] = field(default_factory=dict, init=False)
    learning_rates: dict[str, str] = field(default_factory=dict, init=False)
    eval_results_dict: dict[str, dict[str, float]] = field(default_factory=dict, init=False)
    fusion_weights_dict: dict[str, dict[str, float]] = field(default_factory=dict, init=False)
    fusion_examples: list[dict[str, Any]] = field(default_factory=list, init=False)
    eval_lines_list: list[dict[str, Any]] = field(default_factory=list, init=False)
    train_samples: int | None = field(default=None, init=False)
    train_samples_limit: int | None = field(default=None, init=False)
    eval_samples_limit: int | None = field(default=None, init=False)
    example_inputs: list[Any] = field(default_factory=list, init=False)
    library_name: str = field(default="transformers", init=False)
    version: dict[str, str] = field(default_factory=_versions, init=False)

    # ---- filling ---------------------------------------------------------------------------------------------
    def register_model(self, model) -> None:
        """Read the members, fusion, head and labels from a multi-encoder (the package's class or the remote one, or
        a peft model holding one)."""
        if is_peft_model(model):
            model = model.get_base_model()
        config = model.config
        base = multiencoder_base(model)
        word_level = bool(getattr(base, "word_level", False))
        cls_name = type(model).__name__
        if cls_name.endswith("ForTokenClassification"):
            self.pipeline_tag = "token-classification"
        elif cls_name.endswith("ForSequenceClassification"):
            self.pipeline_tag = "text-classification"
        else:
            self.pipeline_tag = "feature-extraction"
        poolings = [config.word_pooling] * config.num_encoders if word_level else config.encoder_poolings
        self.members = []
        for i, name in enumerate(config.encoder_names):
            member_config = config.encoders[i]
            member = base.encoders[i]
            self.members.append({
                "name": name,
                "checkpoint": member_config.get("_name_or_path") or name,
                "model_type": member_config.get("model_type", type(member).__name__),
                "architecture": type(member).__name__,
                "hidden_size": config.encoder_hidden_sizes[i],
                "pooling": poolings[i],
                "parameters": sum(p.numel() for p in member.parameters()),
                "trainable": any(p.requires_grad for p in member.parameters()),
            })
        self.fusion = config.fusion
        self.fusion_gating = config.fusion_gating if config.fusion in ("dme", "cdme") else None
        self.fused_size = config.fused_size(word_level)
        if self.pipeline_tag != "feature-extraction":
            self.num_labels = config.num_labels
            id2label = config.id2label or {}
            labels = [str(id2label[i]) for i in sorted(id2label)] if id2label else []
            # Regression, or the LABEL_0... names transformers makes up: nothing worth printing.
            self.labels = None if config.num_labels == 1 or all(re.fullmatch(r"LABEL_\d+", x) for x in labels) \
                else labels

    def set_training_info(self, args, model=None, optimizer=None) -> None:
        """Hyperparameters from the `TrainingArguments`, and each member's learning rate from the optimizer."""
        hp: dict[str, Any] = {"learning_rate": args.learning_rate}
        if model is not None and optimizer is not None:
            rates = encoder_learning_rates(model, optimizer)
            self.learning_rates = {}
            for name, values in rates.items():
                if not values:
                    text = "frozen" if name != "head" else "-"
                elif len(values) == 1:
                    text = _format_lr(values[0])
                else:  # layer-wise decay: from the embeddings' rate up to the top layers'
                    text = f"{_format_lr(values[0])} to {_format_lr(values[-1])} (layer-wise decay)"
                self.learning_rates[name] = text
            for name, text in self.learning_rates.items():
                hp[f"learning_rate ({'fusion + classifier' if name == 'head' else name})"] = text
        if model is not None and is_peft_model(model):  # LoRA: its settings (the card describes the merged model)
            lora = model.peft_config[model.active_adapter]
            hp["peft"] = (f"{type(lora).__name__} r={lora.r}, alpha={lora.lora_alpha}, dropout={lora.lora_dropout}, "
                          f"merged into the members")
        hp["train_batch_size"] = args.per_device_train_batch_size
        hp["eval_batch_size"] = args.per_device_eval_batch_size
        hp["seed"] = args.seed
        if args.gradient_accumulation_steps > 1:
            hp["gradient_accumulation_steps"] = args.gradient_accumulation_steps
        total = args.per_device_train_batch_size * args.world_size * args.gradient_accumulation_steps
        if total != args.per_device_train_batch_size:
            hp["total_train_batch_size"] = total
        optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer wraps it
        if optimizer is not None:
            defaults = optimizer.defaults
            described = ", ".join(f"{k}={defaults[k]}" for k in ("betas", "eps") if k in defaults)
            if defaults.get("fused"):
                described = ", ".join(filter(None, [described, "fused"]))
            hp["optimizer"] = f"{type(optimizer).__name__}" + (f" with {described}" if described else "")
        else:
            hp["optimizer"] = str(getattr(args.optim, "value", args.optim))
        hp["weight_decay"] = args.weight_decay
        hp["lr_scheduler_type"] = str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type))
        if args.warmup_steps:
            hp["lr_scheduler_warmup_steps"] = args.warmup_steps
        if args.max_steps is not None and args.max_steps > 0:
            hp["training_steps"] = args.max_steps
        else:
            hp["num_epochs"] = args.num_train_epochs
        if args.bf16 or args.fp16:
            hp["mixed_precision_training"] = "bf16" if args.bf16 else "fp16"
        choice = fast_path_choice(args)
        hp["precision"] = describe(choice) if choice else ("bf16 autocast" if args.bf16 else
                                                            "fp16 autocast" if args.fp16 else "fp32")
        self.hyperparameters = hp

    def set_eval_results(self, metrics: dict[str, Any], split: str | None = None) -> None:
        """Record an evaluation (the Trainer's `eval_*` metrics) under `split` (default: `eval_split`).

        `fusion_weight_<member>` entries (as `metrics.build_compute_metrics` reports them) become the members' mean
        fusion weights; bookkeeping (loss, runtime, ...) is left out. A later evaluation of a split replaces the
        earlier one.
        """
        split = split or self.eval_split
        names = [m["name"] for m in self.members]
        results = {}
        for key, value in metrics.items():
            key = key.removeprefix("eval_")
            if is_fusion_weight_metric(key, names) or key in _NOT_METRICS:
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                results[key] = float(value)
        if results:
            self.eval_results_dict[split] = results
        weights = fusion_weights_from_metrics(metrics, names) if names else None
        if weights is not None:
            self.fusion_weights_dict[split] = weights

    def set_fusion_weights(self, weights: dict[str, float] | list[float], split: str | None = None) -> None:
        """Record each member's mean fusion weight on `split` (a `{member: weight}` dict or one value per member)."""
        if not isinstance(weights, dict):
            weights = {m["name"]: float(w) for m, w in zip(self.members, weights, strict=True)}
        self.fusion_weights_dict[split or self.eval_split] = {k: float(v) for k, v in weights.items()}

    def set_data_limits(self, train: int | None = None, eval: int | None = None) -> None:
        """Record `max_train_samples` / `max_eval_samples`: the card then says the run used part of the data."""
        self.train_samples_limit, self.eval_samples_limit = train, eval

    def set_example_inputs(self, examples: list[Any]) -> None:
        """Inputs from the task's own data for the usage snippet: strings, `(sentence, pair)` tuples, or word lists."""
        self.example_inputs = [list(e) if isinstance(e, tuple) else e for e in examples]

    def set_fusion_examples(self, examples: list[dict[str, Any]]) -> None:
        """Example inputs with their prediction and per-member weights (`run_glue_multi.py`'s fusion report:
        ``[{"sentence", "prediction", "fusion_weights": {member: weight}}]``)."""
        self.fusion_examples = [dict(e) for e in examples if e.get("fusion_weights")]

    def add_eval_line(self, metrics: dict[str, Any], epoch: float | None, step: int, training_loss=None) -> None:
        """One row of the training-results table; a row for the same step is replaced."""
        line = {
            "Training Loss": training_loss if training_loss is not None else "No log",
            "Epoch": round(epoch, 4) if epoch is not None else "-",
            "Step": step,
            "Validation Loss": metrics.get("eval_loss", "-"),
        }
        names = [m["name"] for m in self.members]
        for key, value in metrics.items():
            key = key.removeprefix("eval_")
            if key not in _NOT_METRICS and not is_fusion_weight_metric(key, names) and isinstance(value, (int, float)):
                line[pretty_metric_name(key)] = value
        self.eval_lines_list = [row for row in self.eval_lines_list if row["Step"] != step] + [line]

    def update_from_trainer_kwargs(self, language=None, license=None, tags=None, finetuned_from=None, tasks=None,
                                   dataset_tags=None, dataset=None, dataset_args=None) -> None:
        """Take the arguments of `Trainer.create_model_card` / `Trainer.push_to_hub` (as run_glue.py passes them)."""

        def first(value):
            return value[0] if isinstance(value, (list, tuple)) else value

        self.language = language or self.language
        self.license = license or self.license
        if tags:
            self.tags = list(dict.fromkeys([*(self.tags or []), *([tags] if isinstance(tags, str) else tags)]))
        if finetuned_from:
            self.base_model = [finetuned_from] if isinstance(finetuned_from, str) else list(finetuned_from)
        if tasks and first(tasks) in TASKS:
            self.pipeline_tag = first(tasks)
        self.dataset_id = first(dataset_tags) or self.dataset_id
        self.dataset_name = first(dataset) or self.dataset_name
        self.dataset_config = first(dataset_args) or self.dataset_config

    # ---- rendering -------------------------------------------------------------------------------------------
    @property
    def main_split(self) -> str:
        """The split the card reports first: the first one evaluated (the dev set)."""
        return next(iter(self.eval_results_dict), next(iter(self.fusion_weights_dict), self.eval_split))

    def get_model_name(self) -> str:
        if self.model_name:
            return self.model_name
        fusion = (self.fusion or "").upper() or "Multi-encoder"
        name = f"{fusion} multi-encoder ({' + '.join(m['name'] for m in self.members)})"
        dataset = self.dataset_name or (f"{self.dataset_id} {self.dataset_config}" if self.dataset_config
                                        else self.dataset_id)
        return f"{name} on {dataset}" if dataset else name

    def get_base_model(self) -> list[str] | None:
        if self.base_model is not None:
            return list(self.base_model) or None
        ids = [m["checkpoint"] for m in self.members if is_hub_model_id(m["checkpoint"])]
        return list(dict.fromkeys(ids)) or None

    def get_tags(self) -> list[str]:
        tags = ["hf_multiencoder", "multiencoder", self.pipeline_tag]
        if self.fusion:
            tags.append(f"fusion-{self.fusion}")
        tags += [*(self.tags or []), "generated_from_trainer"]
        return list(dict.fromkeys(tags))

    def get_eval_results(self) -> list[EvalResult]:
        task_name = TASKS[self.pipeline_tag][1]
        return [
            EvalResult(
                task_type=self.pipeline_tag,
                task_name=task_name,
                dataset_type=self.dataset_id or "unknown",
                dataset_name=self.dataset_name or self.dataset_id or "Unknown",
                dataset_config=self.dataset_config,
                dataset_split=split,
                dataset_revision=self.dataset_revision,
                metric_type=key,
                metric_value=value,
                metric_name=pretty_metric_name(key),
            )
            for split, results in self.eval_results_dict.items()
            for key, value in results.items()
        ]

    def _members_table(self) -> str:
        weights = self.fusion_weights_dict.get(self.main_split)
        rows = []
        for i, m in enumerate(self.members):
            row = {
                "#": i,
                "Member": m["name"],
                "Checkpoint": _member_link(m),
                "Architecture": m["architecture"],
                "Hidden Size": m["hidden_size"],
                "Pooling": m["pooling"],
                "Parameters": f"{m['parameters'] / 1e6:.1f}M" if m["parameters"] >= 1e5 else f"{m['parameters']:,}",
            }
            if self.learning_rates:
                row["Learning Rate"] = self.learning_rates.get(m["name"], "-")
            elif not m["trainable"]:
                row["Learning Rate"] = "frozen"
            if weights:
                row[f"Mean Fusion Weight ({self.main_split})"] = f"{weights[m['name']]:.4f}" \
                    if m["name"] in weights else "-"
            rows.append(row)
        return make_markdown_table(rows).replace("-:|", "--|")

    def _metrics_table(self) -> str:
        lines = [{"Split": split, **{pretty_metric_name(k): v for k, v in results.items()}}
                 for split, results in self.eval_results_dict.items()]
        if len({tuple(line) for line in lines}) > 1:  # splits with different metrics: one table each would do too
            keys = list(dict.fromkeys(k for line in lines for k in line))
            lines = [{k: line.get(k, "-") for k in keys} for line in lines]
        return make_markdown_table(lines).replace("-:|", "--|")

    def _fusion_examples_table(self) -> str:
        rows = []
        for example in self.fusion_examples:
            row = {"Input": example.get("sentence", example.get("text", "")), "Prediction": example.get("prediction")}
            row.update({name: f"{w:.3f}" for name, w in example["fusion_weights"].items()})
            rows.append(row)
        return make_markdown_table(rows).replace("-:|", "--|")

    def to_dict(self) -> dict[str, Any]:
        """The template's variables (the YAML header takes only `YAML_FIELDS` of them, see [`to_yaml`])."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["members"] = [dict(m, link=_member_link(m)) for m in self.members]
        data["model_name"] = self.get_model_name()
        data["tags"] = self.get_tags()
        data["base_model"] = self.get_base_model()
        data["datasets"] = [self.dataset_id] if self.dataset_id else None
        data["task_name"] = self.task_name or TASKS[self.pipeline_tag][1].lower()
        data["auto_class"] = TASKS[self.pipeline_tag][0]
        data["model_id"] = self.model_id or "multiencoder_model_id"
        data["revision_pinned"] = bool(self.revision)
        data["revision"] = self.revision or "main"
        data["fusion_description"] = FUSIONS.get(self.fusion, f"`{self.fusion}` fusion combines them")
        data["fusion_weights"] = self.fusion_weights_dict.get(self.main_split)
        data["fusion_weights_split"] = self.main_split
        data["members_table"] = self._members_table()
        data["metrics_table"] = self._metrics_table() if self.eval_results_dict else ""
        data["fusion_examples_table"] = self._fusion_examples_table() if self.fusion_examples else ""
        data["eval_lines"] = make_markdown_table(self.eval_lines_list)
        example = self.example_inputs[0] if self.example_inputs else next(
            (e.get("sentence") for e in self.fusion_examples if e.get("sentence")), None)
        if example is None:
            example = "John Smith lives in New York ." if self.pipeline_tag == "token-classification" else \
                "The more you read, the more you know."
        if isinstance(example, list) and self.pipeline_tag == "token-classification":
            example = " ".join(example)
        data["predict_example"], data["predict_pair"] = (example if isinstance(example, str) else example[0],
                                                         None if isinstance(example, str) else example[1])
        data["data_limits"] = [text for text in (
            f"Evaluated on the first {self.eval_samples_limit} examples of each evaluated split (`max_eval_samples`), "
            f"not on the whole split." if self.eval_samples_limit else None,
            f"Trained on the first {self.train_samples_limit} training examples (`max_train_samples`), not on the "
            f"whole training set." if self.train_samples_limit else None) if text]
        if self.eval_results_dict:
            data["metrics"] = list(self.eval_results_dict[self.main_split])
            data["model-index"] = eval_results_to_model_index(data["model_name"], self.get_eval_results())
        else:
            data["metrics"] = None
        return data

    def to_yaml(self, line_break=None, original_order=None) -> str:
        data = self.to_dict()
        return yaml_dump({k: data[k] for k in YAML_FIELDS if data.get(k) is not None}, sort_keys=False,
                         line_break=line_break).strip()


def generate_model_card(card_data: MultiEncoderModelCardData, fusion_weights_plot: str | None = None) -> str:
    """Render the card (YAML header + Markdown). ``fusion_weights_plot`` is the plot's file name, if there is one."""
    card = ModelCard.from_template(card_data, template_str=MODEL_CARD_TEMPLATE,
                                   fusion_weights_plot=fusion_weights_plot,
                                   hf_emoji="🤗")
    return card.content


SEEDS_CARD_TEMPLATE = Path(__file__).with_name("seeds_card_template.md").read_text(encoding="utf-8").replace(
    "\\\n", "")


def save_seeds_card(save_directory: str | os.PathLike, card_data: MultiEncoderModelCardData, table: dict) -> str:
    """A `README.md` for a folder of runs that differ only by seed (`run_glue_multi.py --seeds`): the seeds' scores
    and their summary (`results.summarize`), with the YAML header of the runs' own cards (no `model-index`: the
    folder holds several models). ``table`` is `run_glue_multi.py`'s `results.json`. Returns the path."""
    from .results import format_summary

    data = card_data.to_dict()
    header = {k: data[k] for k in YAML_FIELDS if data.get(k) is not None and k != "model-index"}
    content = ModelCard.from_template(
        CardData(**header), template_str=SEEDS_CARD_TEMPLATE, model_name=data["model_name"],
        seeds=[r["seed"] for r in table["runs"]], runs=table["runs"], metric=table["metric"],
        split=card_data.main_split, best=format_summary(table["best_epoch"]),
        final=format_summary(table["final_epoch"]),
        fusion_weights=table.get("mean_fusion_weights"), data_limits=data["data_limits"],
    ).content
    path = os.path.join(save_directory, README_NAME)
    with open(path, "w", encoding="utf-8") as f:
        f.write(content)
    return path


def save_model_card(save_directory: str | os.PathLike, card_data: MultiEncoderModelCardData, model=None,
                    plot: bool = True) -> list[str]:
    """Write ``README.md`` (and, when fusion weights are known, ``fusion_weights.png``) into ``save_directory``.

    The card is rendered from ``card_data`` alone, so calling this again overwrites the files with the same
    sections. Returns the paths written.
    """
    os.makedirs(save_directory, exist_ok=True)
    if model is not None:
        card_data.register_model(model)
    written = []
    plot_file = None
    weights = card_data.fusion_weights_dict.get(card_data.main_split)
    plot_path = os.path.join(save_directory, FUSION_WEIGHTS_PLOT)
    if weights and plot:
        if plot_fusion_weights(weights, plot_path, split=card_data.main_split):
            plot_file = FUSION_WEIGHTS_PLOT
            written.append(plot_path)
    elif weights and os.path.isfile(plot_path):
        plot_file = FUSION_WEIGHTS_PLOT  # README-only rewrite: the plot written before still stands
    readme = os.path.join(save_directory, README_NAME)
    with open(readme, "w", encoding="utf-8") as f:
        f.write(generate_model_card(card_data, fusion_weights_plot=plot_file))
    written.append(readme)
    return written


class ModelCardCallback(TrainerCallback):
    """Fills a [`MultiEncoderModelCardData`] during training (setfit's `ModelCardCallback`, for the stock Trainer).

    Reads the model at `on_init_end`, the hyperparameters and each member's learning rate at `on_train_begin`,
    the last training loss at `on_log`, and every evaluation at `on_evaluate` (reported under
    `card_data.eval_split`; `fusion_weight_<member>` metrics become the members' mean fusion weights).
    """

    def __init__(self, card_data: MultiEncoderModelCardData | None = None):
        self.card_data = card_data if card_data is not None else MultiEncoderModelCardData()
        self._last_loss = None

    def on_init_end(self, args, state, control, model=None, **kwargs):
        if model is not None:
            self.card_data.register_model(model)

    def on_train_begin(self, args, state, control, model=None, optimizer=None, train_dataloader=None, **kwargs):
        if model is not None:
            self.card_data.register_model(model)  # freezing may have happened after the Trainer was built
        self.card_data.set_training_info(args, model, optimizer)
        dataset = getattr(train_dataloader, "dataset", None)
        if dataset is not None and hasattr(dataset, "__len__"):
            self.card_data.train_samples = len(dataset)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self._last_loss = logs["loss"]

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if not metrics:
            return
        data = self.card_data
        data.set_eval_results(metrics)
        if data.eval_split == data.main_split and state.global_step > 0:
            data.add_eval_line(metrics, epoch=state.epoch, step=state.global_step, training_loss=self._last_loss)


@dataclass
class MultiTaskModelCardData(MultiEncoderModelCardData):
    """The card of a [`MultiEncoderForMultiTask`]: the multi-encoder card plus its tasks, each with its head, data set,
    scores and mean fusion weights, and the combination the best checkpoint was chosen by. `MultiTaskTrainer` fills
    `task_datasets`, `task_main_metrics`, `score_description` and `task_sampling` from the task registry.

    Args:
        task_datasets (`dict[str, dict]`, *optional*): per task, `dataset_name`, `dataset_id` and `dataset_config`.
        score_description (`str`, *optional*): what `multitask_score` combines, e.g. "mean of ner overall_f1, trec
            accuracy".
        task_sampling (`str`, *optional*): how the tasks were sampled, e.g. "temperature sampling, T=2".
        All other arguments: see [`MultiEncoderModelCardData`].
    """

    task_datasets: dict[str, dict[str, Any]] = field(default_factory=dict)
    score_description: str | None = None
    task_sampling: str | None = None
    task_main_metrics: dict[str, str] = field(default_factory=dict)

    task_heads: list[dict[str, Any]] = field(default_factory=list, init=False)
    task_results: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict, init=False)
    task_fusion_weights: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict, init=False)

    def register_model(self, model) -> None:
        super().register_model(model)
        self.task_heads = [
            {"name": name, "type": task["type"], "num_labels": task["num_labels"],
             "labels": None if task["type"] == "regression" else [task["id2label"][i]
                                                                  for i in sorted(task["id2label"])]}
            for name, task in model.config.tasks.items()
        ]

    def _task_of(self, key: str) -> tuple[str | None, str]:
        """`"trec_accuracy"` -> `("trec", "accuracy")`; keys of no task -> `(None, key)` (longest task name first)."""
        for name in sorted((t["name"] for t in self.task_heads), key=len, reverse=True):
            if key.startswith(f"{name}_"):
                return name, key[len(name) + 1:]
        return None, key

    def set_eval_results(self, metrics: dict[str, Any], split: str | None = None) -> None:
        """Record an evaluation of every task: `eval_<task>_<metric>` by task (with each task's mean fusion weights),
        the rest (`multitask_score`) as the model's own results."""
        split = split or self.eval_split
        names = [m["name"] for m in self.members]
        overall: dict[str, Any] = {}
        per_task: dict[str, dict[str, Any]] = {}
        for key, value in metrics.items():
            task, rest = self._task_of(key.removeprefix("eval_"))
            if task is None:
                overall[key] = value
            else:
                per_task.setdefault(task, {})[rest] = value
        for task, values in per_task.items():
            weights = fusion_weights_from_metrics(values, names) if names else None
            if weights is not None:
                self.task_fusion_weights.setdefault(split, {})[task] = weights
            results = {k: float(v) for k, v in values.items() if k not in _NOT_METRICS and isinstance(v, (int, float))
                       and not isinstance(v, bool) and not is_fusion_weight_metric(k, names)}
            if results:
                self.task_results.setdefault(split, {})[task] = results
        super().set_eval_results(overall, split)

    def add_eval_line(self, metrics: dict[str, Any], epoch: float | None, step: int, training_loss=None) -> None:
        """A training-results row with the mean loss, each task's main metric and `multitask_score`."""
        keep = {"eval_loss", f"eval_{MULTITASK_SCORE}",
                *(f"eval_{task}_{metric}" for task, metric in self.task_main_metrics.items())}
        super().add_eval_line({k: v for k, v in metrics.items() if k in keep}, epoch, step, training_loss)

    def get_model_name(self) -> str:
        if not self.model_name and not self.dataset_name and self.task_datasets:
            names = [d.get("dataset_name") or d.get("dataset_id") or task for task, d in self.task_datasets.items()]
            return f"{super().get_model_name()} on {' + '.join(dict.fromkeys(names))}"
        return super().get_model_name()

    def get_eval_results(self) -> list[EvalResult]:
        """One `model-index` result per task and metric, under the task's own type and data set."""
        heads = {t["name"]: t for t in self.task_heads}
        results = []
        for split, tasks in self.task_results.items():
            for task, metrics in tasks.items():
                task_type = "token-classification" if heads.get(task, {}).get("type") == "token" \
                    else "text-classification"
                dataset = self.task_datasets.get(task, {})
                results.extend(
                    EvalResult(task_type=task_type, task_name=f"{TASKS[task_type][1]} ({task})",
                               dataset_type=dataset.get("dataset_id") or "unknown",
                               dataset_name=dataset.get("dataset_name") or dataset.get("dataset_id") or task,
                               dataset_config=dataset.get("dataset_config"), dataset_split=split,
                               metric_type=key, metric_value=value, metric_name=pretty_metric_name(key))
                    for key, value in metrics.items() if key != "loss")
        return results

    def _tasks_table(self) -> str:
        split = self.main_split
        results = self.task_results.get(split, {})
        weights = self.task_fusion_weights.get(split, {})
        rows = []
        for head in self.task_heads:
            name = head["name"]
            dataset = self.task_datasets.get(name, {})
            metric = self.task_main_metrics.get(name)
            row = {
                "Task": name,
                "Type": head["type"],
                "Labels": "score" if head["labels"] is None else f"{head['num_labels']}",
                "Dataset": dataset.get("dataset_name") or dataset.get("dataset_id") or "-",
                "Main Metric": pretty_metric_name(metric) if metric else "-",
                f"Score ({split})": f"{results[name][metric]:.4f}" if metric and metric in results.get(name, {})
                else "-",
            }
            if weights:  # fusions with weights (DME, CDME)
                for member in self.members:
                    w = weights.get(name, {}).get(member["name"])
                    row[f"Fusion Weight {member['name']}"] = f"{w:.4f}" if w is not None else "-"
            rows.append(row)
        return make_markdown_table(rows).replace("-:|", "--|")

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        ids = [d.get("dataset_id") for d in self.task_datasets.values() if d.get("dataset_id")]
        data["datasets"] = list(dict.fromkeys(ids)) or None
        data["tasks_table"] = self._tasks_table() if self.task_heads else ""
        if self.task_heads and not self.task_name:
            data["task_name"] = f"{len(self.task_heads)} tasks at once"
        data["task_sampling_description"] = self.task_sampling or "sampled by the Trainer's schedule"
        if self.task_results:
            metrics = [m for split in self.task_results.values() for task in split.values() for m in task]
            data["metrics"] = list(dict.fromkeys(m for m in metrics if m != "loss"))
            data["model-index"] = eval_results_to_model_index(data["model_name"], self.get_eval_results())
        return data


__all__ = [
    "FUSION_WEIGHTS_PLOT",
    "MODEL_CARD_TEMPLATE",
    "ModelCardCallback",
    "MultiEncoderModelCardData",
    "MultiTaskModelCardData",
    "generate_model_card",
    "encoder_learning_rates",
    "member_learning_rates",
    "plot_fusion_weights",
    "save_model_card",
    "save_seeds_card",
]
