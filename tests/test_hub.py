"""Pushing to the Hub, the model card, loading by repo id and resuming, without the network.

The real push code runs up to the network boundary: `HfApi.create_commit` and the hf_xet upload pipeline that
`upload_folder` uses instead of it are replaced by a recorder, as are the two other requests on the way
(`create_repo`, and the Hub's README/YAML validation, done here with huggingface_hub's own card parser). Each recorded
commit is laid out as a snapshot of a temporary Hugging Face cache, so the pushed repository then loads by repo id
offline, in a subprocess that cannot import hf_multiencoder.
"""

import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import transformers
from datasets import Dataset
from huggingface_hub import CommitInfo, HfApi, ModelCard, _upload_pipeline, constants
from huggingface_hub.hf_api import RepoUrl
from huggingface_hub.utils._runtime import is_xet_available
from safetensors.torch import load as load_safetensors
from transformers import TrainingArguments

from hf_multiencoder import (
    MultiEncoderDataCollator,
    MultiEncoderForSequenceClassification,
    MultiEncoderTokenizer,
)
from hf_multiencoder.data.tasks import TaskSpec
from hf_multiencoder.training import optimization
from hf_multiencoder.training.metrics import build_compute_metrics
from hf_multiencoder.training.model_card import (
    FUSION_WEIGHTS_PLOT,
    MultiEncoderModelCardData,
    encoder_learning_rates,
    member_learning_rates,
    save_model_card,
)
from hf_multiencoder.training.optimization import create_multiencoder_optimizer, freeze_encoders
from hf_multiencoder.training.trainer import MultiEncoderTrainer, push_multiencoder_to_hub

REPO_ID = "tiny-user/cola-multiencoder"
MEMBERS = ["tiny-random/bert", "tiny-random/roberta", "tiny-random/distilbert"]
NAMES = ["bert", "roberta", "distil"]
ENCODER_LRS = [1e-3, 5e-4, 2e-4]
HEAD_LR = 3e-3
# the model's code imports the tokenizer's file too (`from_encoders` records the members' tokenizer fingerprints)
MODEL_CODE = {"configuration_multiencoder.py", "embedding_multiencoder.py", "fusion_multiencoder.py",
              "modeling_multiencoder.py", "pipeline_multiencoder.py", "precision_multiencoder.py",
              "tokenization_multiencoder.py"}
TOKENIZER_CODE = {"tokenization_multiencoder.py"}
POS = ["the cat sat on the mat", "a cat runs", "the cat likes the dog", "she can go to the cat"]
NEG = ["somebody just left", "he went to paris", "john smith is new", "it was 2024 in york"]
TEXTS = ["He can will go", "the cat sat on the mat"]
SITE_PACKAGES = os.path.dirname(os.path.dirname(transformers.__file__))


# ---- the Hub's side of the wire ------------------------------------------------------------------------------------
@dataclass
class Commit:
    repo_id: str
    oid: str
    message: str
    files: dict  # path in repo -> bytes, as sent
    deleted: list
    via: str  # "create_commit" or "xet_pipeline"


class FakeHub:
    """Records what huggingface_hub sends and stores each commit as a snapshot of a Hugging Face cache."""

    def __init__(self, cache_dir: Path):
        self.cache = cache_dir
        self.commits: list[Commit] = []
        self.validated: list[str] = []
        self.created: list[str] = []

    def folder(self, repo_id: str) -> Path:
        return self.cache / f"models--{repo_id.replace('/', '--')}"

    def head(self, repo_id: str, branch: str = "main") -> str | None:
        ref = self.folder(repo_id) / "refs" / branch
        return ref.read_text() if ref.exists() else None

    def tree(self, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        oid = revision if re.fullmatch(r"[0-9a-f]{40}", revision) else self.head(repo_id, revision)
        if oid is None:
            return {}
        snapshot = self.folder(repo_id) / "snapshots" / oid
        return {p.relative_to(snapshot).as_posix(): p.read_bytes() for p in sorted(snapshot.rglob("*")) if p.is_file()}

    def commit(self, repo_id, files: dict[str, bytes], deleted, message, via, revision=None) -> CommitInfo:
        branch = revision or "main"
        parent = self.head(repo_id, branch) or ""
        tree = self.tree(repo_id, branch)
        for path in deleted:
            tree = {p: d for p, d in tree.items() if p != path and not p.startswith(path.rstrip("/") + "/")}
        tree.update(files)
        digest = hashlib.sha1(parent.encode() + message.encode())
        for path in sorted(tree):
            digest.update(path.encode() + hashlib.sha256(tree[path]).digest())
        oid = digest.hexdigest()
        folder = self.folder(repo_id)
        for path, data in tree.items():  # blobs + relative symlinks, as huggingface_hub lays out its cache
            blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
            if not blob.exists():
                blob.parent.mkdir(parents=True, exist_ok=True)
                blob.write_bytes(data)
            link = folder / "snapshots" / oid / path
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(blob, link.parent))
        (folder / "refs").mkdir(parents=True, exist_ok=True)
        (folder / "refs" / branch).write_text(oid)
        self.commits.append(Commit(repo_id, oid, message, dict(files), list(deleted), via))
        return CommitInfo(commit_url=f"{constants.ENDPOINT}/{repo_id}/commit/{oid}", commit_message=message,
                          commit_description="", oid=oid)

    def add_folder(self, repo_id: str, folder: str) -> None:
        files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in Path(folder).rglob("*") if p.is_file()}
        self.commit(repo_id, files, [], "initial commit", via="seed")

    # -- the replaced network calls --
    def create_repo(self, repo_id, *args, **kwargs):
        self.created.append(repo_id)
        return RepoUrl(f"{constants.ENDPOINT}/{repo_id}")

    def validate_yaml(self, content, *, repo_type=None, token=None):
        """The Hub's `/api/validate-yaml`, done by huggingface_hub's own parser (model-index included)."""
        self.validated.append(content)
        ModelCard(content)

    def _record(self, repo_id, operations, message, via, revision):
        files, deleted = {}, []
        for op in operations:
            if hasattr(op, "path_or_fileobj"):
                with op.as_file() as f:
                    files[op.path_in_repo] = f.read()
            else:
                deleted.append(op.path_in_repo)
        if "README.md" in files:
            self.validate_yaml(files["README.md"].decode("utf-8"))
        return self.commit(repo_id, files, deleted, message, via, revision)

    def create_commit(self, repo_id, operations, *, commit_message, revision=None, **kwargs):
        return self._record(repo_id, list(operations), commit_message, "create_commit", revision)

    def pipelined_upload(self, api, *, repo_id, add_operations, delete_operations, commit_message, revision=None,
                         **kwargs):
        return self._record(repo_id, [*delete_operations, *add_operations], commit_message, "xet_pipeline", revision)

    def new_commits(self, since: int) -> list[Commit]:
        return self.commits[since:]


@pytest.fixture(scope="module")
def hub(tiny_paths, tmp_path_factory):
    fake = FakeHub(tmp_path_factory.mktemp("hf_cache"))
    mp = pytest.MonkeyPatch()
    mp.setattr(constants, "HF_HUB_CACHE", str(fake.cache))
    mp.setattr(constants, "HF_HUB_OFFLINE", True)  # anything else that tries the network fails loudly
    mp.setattr(HfApi, "create_repo", fake.create_repo)
    mp.setattr(HfApi, "_validate_yaml", fake.validate_yaml)
    mp.setattr(HfApi, "create_commit", fake.create_commit)
    mp.setattr(_upload_pipeline, "pipelined_upload", fake.pipelined_upload)
    for repo_id, path in zip(MEMBERS, tiny_paths):
        fake.add_folder(repo_id, path)
    yield fake
    mp.undo()


def tokenized(tokenizer, texts, labels):
    ds = Dataset.from_dict({"sentence": texts, "label": labels})
    return ds.map(lambda b: dict(tokenizer(b["sentence"], truncation=True, max_length=32)), batched=True)


# Accuracy and each member's mean fusion weight (`fusion_weight_<member>`), as run_glue_multi.py reports them.
compute_metrics = build_compute_metrics(TaskSpec("custom", label_list=["unacceptable", "acceptable"]), NAMES)


def training_args(output_dir, **kwargs):
    return TrainingArguments(output_dir=str(output_dir), per_device_train_batch_size=8, per_device_eval_batch_size=16,
                             learning_rate=1e-3, num_train_epochs=2, logging_steps=1, report_to=[], seed=0,
                             use_cpu=True, save_strategy="epoch", hub_model_id=REPO_ID, **kwargs)


@pytest.fixture(scope="module")
def run(hub, tmp_path_factory):
    """Members pulled by repo id from the (fake) Hub cache, a short training run, an evaluation, a push."""
    out = tmp_path_factory.mktemp("run")
    torch.manual_seed(0)
    model = MultiEncoderForSequenceClassification.from_encoders(
        MEMBERS, encoder_names=NAMES, fusion="dme", num_labels=2, problem_type="single_label_classification",
        id2label={0: "unacceptable", 1: "acceptable"}, label2id={"unacceptable": 0, "acceptable": 1})
    tokenizer = MultiEncoderTokenizer.from_encoders(MEMBERS, encoder_names=NAMES)
    train = tokenized(tokenizer, (POS + NEG) * 4, ([1] * 4 + [0] * 4) * 4)
    dev = tokenized(tokenizer, POS + NEG, [1] * 4 + [0] * 4)
    args = training_args(out, eval_strategy="epoch")
    optimizer = create_multiencoder_optimizer(model, args, encoder_learning_rates=ENCODER_LRS,
                                              head_learning_rate=HEAD_LR)
    card_data = MultiEncoderModelCardData(language="en", license="apache-2.0", dataset_id="nyu-mll/glue",
                                          dataset_name="GLUE CoLA", dataset_config="cola",
                                          task_name="linguistic acceptability")
    trainer = MultiEncoderTrainer(model=model, args=args, train_dataset=train, eval_dataset=dev,
                                  processing_class=tokenizer, data_collator=MultiEncoderDataCollator(tokenizer),
                                  compute_metrics=compute_metrics, optimizers=(optimizer, None),
                                  model_card_data=card_data)
    trainer.train()
    metrics = trainer.evaluate()
    trainer.save_metrics("eval", metrics)
    start = len(hub.commits)
    info = trainer.push_to_hub()
    model.eval()
    with torch.no_grad():
        logits = model(**tokenizer(TEXTS, padding=True, return_tensors="pt")).logits
    return {"trainer": trainer, "model": model, "tokenizer": tokenizer, "out": out, "info": info,
            "commits": hub.new_commits(start), "metrics": metrics, "logits": logits, "args": args,
            "train": train}


def readme(commit: Commit) -> ModelCard:
    return ModelCard(commit.files["README.md"].decode("utf-8"))


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


# ---- pushing -------------------------------------------------------------------------------------------------------
def test_trainer_push_uploads_everything_a_user_needs(hub, run):
    main, pin = run["commits"]
    assert hub.created[-1] == REPO_ID
    assert main.oid == run["info"].oid and main.via == ("xet_pipeline" if is_xet_available() else "create_commit")
    member_files = {f"tokenizer_{i}/{f}" for i in range(3)
                    for f in os.listdir(run["out"] / f"tokenizer_{i}")}
    assert {"tokenizer_0/tokenizer_config.json", "tokenizer_1/tokenizer.json"} <= member_files
    assert set(main.files) == MODEL_CODE | TOKENIZER_CODE | member_files | {
        "config.json", "model.safetensors", "tokenizer_config.json", "training_args.bin", "eval_results.json",
        "all_results.json",
        "README.md", FUSION_WEIGHTS_PLOT}  # no checkpoint-*/ folders
    config = json.loads(main.files["config.json"])
    assert config["auto_map"] == {
        "AutoConfig": "configuration_multiencoder.MultiEncoderConfig",
        "AutoModelForSequenceClassification": "modeling_multiencoder.MultiEncoderForSequenceClassification",
    }
    assert json.loads(main.files["tokenizer_config.json"])["auto_map"] == {
        "AutoTokenizer": ["tokenization_multiencoder.MultiEncoderTokenizer", None]}
    weights = load_safetensors(main.files["model.safetensors"])
    state = run["model"].state_dict()
    assert set(weights) == set(state)
    assert any(k.startswith("multiencoder.fusion.") for k in weights) and "classifier.weight" in weights
    for key, value in state.items():
        torch.testing.assert_close(weights[key], value, msg=key)
    assert main.files[FUSION_WEIGHTS_PLOT].startswith(b"\x89PNG\r\n\x1a\n")
    assert main.files["README.md"].decode() in hub.validated  # the README went through validation first
    # the follow-up commit pins the card's snippet to the commit that holds the code and weights
    assert set(pin.files) == {"README.md"} and main.oid[:7] in pin.message
    assert f'revision = "{main.oid}"' in pin.files["README.md"].decode()
    assert hub.head(REPO_ID) == pin.oid
    assert (run["out"] / "README.md").read_bytes() == pin.files["README.md"]


def test_model_card_metadata_round_trips_through_huggingface_hub(run):
    card = readme(run["commits"][-1])
    data = card.data
    assert data.library_name == "transformers" and data.pipeline_tag == "text-classification"
    assert data.base_model == MEMBERS
    assert data.datasets == ["nyu-mll/glue"] and data.language == "en" and data.license == "apache-2.0"
    assert {"hf_multiencoder", "multiencoder", "fusion-dme", "generated_from_trainer"} <= set(data.tags)
    assert len(data.tags) == len(set(data.tags))
    # the model-index holds what the run produced (eval_results.json), and parses back into EvalResults
    produced = json.loads((run["out"] / "eval_results.json").read_text())
    results = {(r.dataset_split, r.metric_type): r.metric_value for r in data.eval_results}
    assert results == {("validation", "accuracy"): produced["eval_accuracy"]}
    result = data.eval_results[0]
    assert (result.task_type, result.dataset_type, result.dataset_config, result.dataset_name) == (
        "text-classification", "nyu-mll/glue", "cola", "GLUE CoLA")
    assert data.model_name == "DME multi-encoder (bert + roberta + distil) on GLUE CoLA"
    assert data.metrics == ["accuracy"]


def test_model_card_body(run):
    main, pin = run["commits"]
    text = readme(pin).text
    produced = json.loads((run["out"] / "eval_results.json").read_text())
    lrs = dict(zip(NAMES, ["0.001", "0.0005", "0.0002"]))
    for i, name in enumerate(NAMES):  # the members table: checkpoint, learning rate, mean fusion weight
        row = next(line for line in text.splitlines() if line.startswith(f"| {i} ") and f" {name} " in line)
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert f"[{MEMBERS[i]}](https://huggingface.co/{MEMBERS[i]})" in cells
        assert lrs[name] in cells and f"{produced[f'eval_fusion_weight_{name}']:.4f}" in cells
    assert "Mean Fusion Weight (validation)" in text
    assert f"]({FUSION_WEIGHTS_PLOT})" in text and FUSION_WEIGHTS_PLOT in main.files
    for name, lr in lrs.items():
        assert f"- learning_rate ({name}): {lr}" in text
    assert f"- learning_rate (fusion + classifier): {HEAD_LR:g}" in text
    assert "- train_batch_size: 8" in text and "- num_epochs: 2" in text and "- optimizer: AdamW" in text
    assert "### Training Results" in text and re.search(r"\|\s*Validation Loss\s*\|", text)
    snippet = python_blocks(text)[0]
    compile(snippet, "snippet", "exec")
    assert "trust_remote_code=True" in snippet and f'model_id = "{REPO_ID}"' in snippet
    assert f'revision = "{main.oid}"' in snippet and "revision=revision" in snippet
    assert "AutoModelForSequenceClassification" in snippet
    for label, version in (("Transformers", transformers.__version__), ("PyTorch", torch.__version__)):
        assert f"- {label}: {version}" in text
    assert "Dynamic Meta-Embeddings" in text and "@inproceedings{kiela-etal-2018-dynamic" in text


def test_rebuilding_the_card_is_safe(run, tmp_path):
    trainer, out = run["trainer"], run["out"]
    first = (out / "README.md").read_text()
    trainer.create_model_card(tags=["glue"])
    trainer.create_model_card(tags=["glue"])
    again = (out / "README.md").read_text()
    headers = [line for line in again.splitlines() if line.startswith("#") and not line.startswith("# ")]
    assert len(headers) == len(set(headers)), headers
    assert again.count("\n---\n") == 1 and again.count("model-index:") == 1
    card = ModelCard(again)
    assert card.data.tags.count("glue") == 1 and len(card.data.tags) == len(set(card.data.tags))
    assert card.text == ModelCard(first).text  # same body: only the tag was added
    save_model_card(tmp_path, trainer.model_card_data)
    save_model_card(tmp_path, trainer.model_card_data)
    assert (tmp_path / "README.md").read_text() == again
    assert sorted(os.listdir(tmp_path)) == ["README.md", FUSION_WEIGHTS_PLOT]


def test_card_says_what_part_of_the_data_was_used_and_fits_pair_tasks(run, tmp_path):
    """The card must not overstate: `max_train_samples` / `max_eval_samples` are stated (a train-only card too), and
    a pair task's snippet passes a pair, from the task's own data."""
    import copy

    data = copy.deepcopy(run["trainer"].model_card_data)
    data.set_data_limits(train=12, eval=5)
    data.set_example_inputs([("A man is playing a flute.", "A man plays the flute.")])
    save_model_card(tmp_path, data, model=run["model"])
    text = ModelCard((tmp_path / "README.md").read_text()).text
    evaluation = text[text.index("## Evaluation"):text.index("## Uses")]
    assert "Evaluated on the first 5 examples of each evaluated split (`max_eval_samples`)" in evaluation
    assert "Trained on the first 12 training examples (`max_train_samples`)" in evaluation
    snippet = python_blocks(text)[0]
    compile(snippet, "snippet", "exec")
    assert ('predict_with_fusion_weights(tokenizer, ["A man is playing a flute."], '
            'text_pairs=["A man plays the flute."])') in snippet
    # a run that was only trained (no evaluation table) still says it used part of the training data
    data.eval_results_dict, data.eval_lines_list = {}, []
    data.set_data_limits(train=12)
    save_model_card(tmp_path, data, model=run["model"])
    text = ModelCard((tmp_path / "README.md").read_text()).text
    assert "## Evaluation" not in text
    training = text[text.index("## Training Details"):]
    assert "Trained on the first 12 training examples (`max_train_samples`)" in training
    assert "Evaluated on the first" not in text


def test_hub_validation_rejects_a_broken_model_index(hub, run):
    content = run["commits"][-1].files["README.md"].decode().replace("    - type: accuracy", "    - kind: accuracy")
    with pytest.raises(ValueError, match="model_index|model-index|eval"):
        hub.validate_yaml(content)


def test_model_and_tokenizer_push_to_hub(hub, run):
    model, tokenizer = run["model"], run["tokenizer"]
    card_before = readme(run["commits"][-1])
    start = len(hub.commits)
    model.push_to_hub(REPO_ID)
    tokenizer.push_to_hub(REPO_ID)
    model.push_to_hub("tiny-user/fresh-repo")
    pushed_model, pushed_tokenizer, fresh = hub.new_commits(start)
    assert set(pushed_model.files) == MODEL_CODE | {"config.json", "model.safetensors", "README.md"}
    assert json.loads(pushed_model.files["config.json"])["auto_map"]["AutoModelForSequenceClassification"] == \
        "modeling_multiencoder.MultiEncoderForSequenceClassification"
    member_files = {f for f in run["commits"][0].files if f.startswith("tokenizer_")}
    assert set(pushed_tokenizer.files) == TOKENIZER_CODE | member_files | {"tokenizer_config.json", "README.md"}
    # transformers keeps the card already on the Hub: ours survives pushing the model and the tokenizer again
    for commit in (pushed_model, pushed_tokenizer):
        card = readme(commit)
        assert card.text == card_before.text and card.data.to_dict() == card_before.data.to_dict()
    # a fresh repository gets transformers' default card
    assert readme(fresh).data.library_name == "transformers"
    assert set(hub.tree(REPO_ID)) >= set(run["commits"][0].files)


def test_tokenizer_save_pretrained_can_push(hub, run, tmp_path):
    start = len(hub.commits)
    run["tokenizer"].save_pretrained(tmp_path / "tok", push_to_hub=True, repo_id="tiny-user/tokenizer-only",
                                     commit_message="Add the tokenizer")
    (commit,) = hub.new_commits(start)
    assert commit.repo_id == "tiny-user/tokenizer-only" and commit.message == "Add the tokenizer"
    local = {p.relative_to(tmp_path / "tok").as_posix() for p in (tmp_path / "tok").rglob("*") if p.is_file()}
    # what was saved, uploaded by the inherited push_to_hub (which adds transformers' default card)
    assert set(commit.files) == local | {"README.md"} and TOKENIZER_CODE <= local


def test_push_multiencoder_to_hub_outside_a_trainer(hub, run, tmp_path):
    model, tokenizer = run["model"], run["tokenizer"]
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"score": 1.0}))
    card_data = MultiEncoderModelCardData(dataset_name="my data")
    card_data.register_model(model)
    card_data.set_fusion_weights([0.5, 0.3, 0.2])
    start = len(hub.commits)
    info = push_multiencoder_to_hub(model, "tiny-user/helper", tokenizer, card_data, extra_files=[results])
    main, pin = hub.new_commits(start)
    assert info.oid == main.oid and set(pin.files) == {"README.md"}
    assert {"config.json", "model.safetensors", "tokenizer_config.json", "README.md", FUSION_WEIGHTS_PLOT,
            "results.json"} | MODEL_CODE | TOKENIZER_CODE <= set(main.files)
    card = readme(pin)
    assert card.data.base_model == MEMBERS and card.data.eval_results is None  # nothing evaluated: no model-index
    assert f'revision = "{main.oid}"' in card.text and "| 0.5000 " in card.text


def test_encoder_learning_rates_follow_the_optimizer(run, tiny_paths):
    model = MultiEncoderForSequenceClassification.from_encoders(tiny_paths, encoder_names=NAMES, num_labels=2)
    freeze_encoders(model, ["distil"])
    args = training_args(run["out"])
    optimizer = create_multiencoder_optimizer(model, args, encoder_learning_rates=[1e-4, 2e-4, 3e-4],
                                              head_learning_rate=1e-3, layerwise_lr_decay=0.5)
    by_name = {}
    for group in optimizer.param_groups:
        by_name.setdefault(group["name"].split(".")[0], set()).add(group["lr"])
    rates = encoder_learning_rates(model, optimizer)
    assert rates == {"bert": sorted(by_name["encoder_0"]), "roberta": sorted(by_name["encoder_1"]), "distil": [],
                     "head": [1e-3]}
    assert len(rates["bert"]) > 1 and max(rates["roberta"]) <= 2e-4
    data = MultiEncoderModelCardData()
    data.register_model(model)
    data.set_training_info(args, model, optimizer)
    assert data.learning_rates["distil"] == "frozen" and data.learning_rates["head"] == "0.001"
    low, high = rates["roberta"][0], rates["roberta"][-1]
    assert data.learning_rates["roberta"] == f"{low:g} to {high:g} (layer-wise decay)"
    # the Trainer's default optimizer gives every trainable member the base rate
    stock = torch.optim.AdamW([{"params": [p for p in model.parameters() if p.requires_grad], "lr": 5e-5}])
    assert encoder_learning_rates(model, stock) == {"bert": [5e-5], "roberta": [5e-5], "distil": [], "head": [5e-5]}
    assert member_learning_rates is encoder_learning_rates  # the earlier name still imports


# ---- loading and resuming in fresh processes ----------------------------------------------------------------------
def run_python(code: str, cwd, env_updates: dict) -> dict:
    """Run ``code`` in a fresh interpreter started with -S (the editable install's .pth is not processed)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(env_updates)
    proc = subprocess.run([sys.executable, "-S", "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


ISOLATED_PREAMBLE = f"""
import json, sys
sys.path.append({SITE_PACKAGES!r})  # site-packages without its .pth files: no editable hf_multiencoder
try:
    import hf_multiencoder
    print(json.dumps({{"importable": True}})); sys.exit(0)
except ImportError:
    pass
"""


@pytest.mark.slow  # a subprocess or a compile: run by `make test`, skipped by `make test-fast`
def test_load_by_repo_id_offline_without_the_package(hub, run, tmp_path):
    """From the Hugging Face cache, with HF_HUB_OFFLINE=1, where hf_multiencoder cannot be imported: the model by
    repo id (at the card's pinned revision and at main), and a member exported from the remote-code model."""
    pinned = run["commits"][0].oid
    code = ISOLATED_PREAMBLE + textwrap.dedent(f"""
        import torch
        from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer
        texts, out = {TEXTS!r}, {{"importable": False}}
        def logits(source, **kwargs):
            model = AutoModelForSequenceClassification.from_pretrained(source, trust_remote_code=True, **kwargs)
            tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=True, **kwargs)
            with torch.no_grad():
                result = model.eval()(**tokenizer(texts, padding=True, return_tensors="pt")).logits.tolist()
            return model, tokenizer, result
        model, tokenizer, out["pinned"] = logits({REPO_ID!r}, revision={pinned!r})
        out["module"], out["tokenizer"] = type(model).__module__, type(tokenizer).__module__
        _, _, out["main"] = logits({REPO_ID!r})
        model.export_encoder("roberta", "exported", tokenizer=tokenizer)
        member = AutoModel.from_pretrained("exported").eval()
        member_tokenizer = AutoTokenizer.from_pretrained("exported")
        with torch.no_grad():
            out["member"] = member(**member_tokenizer(texts, padding=True, return_tensors="pt")).last_hidden_state[
                :, 0].tolist()
        print(json.dumps(out))
    """)
    result = run_python(code, tmp_path, {"HF_HUB_CACHE": str(hub.cache), "HF_HUB_OFFLINE": "1",
                                         "HF_MODULES_CACHE": str(tmp_path / "modules")})
    assert result["importable"] is False, "the subprocess must not see hf_multiencoder"
    assert result["module"].startswith("transformers_modules.tiny_hyphen_user.cola_hyphen_multiencoder.")
    assert result["tokenizer"].startswith("transformers_modules.")
    torch.testing.assert_close(torch.tensor(result["pinned"]), run["logits"], atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.tensor(result["main"]), run["logits"], atol=1e-5, rtol=0)
    roberta = run["model"].multiencoder.encoders[1]
    member_batch = run["tokenizer"].tokenizers[1](TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = roberta(**member_batch).last_hidden_state[:, 0]
    torch.testing.assert_close(torch.tensor(result["member"]), expected, atol=1e-5, rtol=0)


@pytest.mark.slow  # a subprocess or a compile: run by `make test`, skipped by `make test-fast`
def test_checkpoints_carry_the_code_and_resume_in_a_fresh_process(run, tmp_path):
    """transformers#46165: in a new process where hf_multiencoder cannot be imported, a Trainer checkpoint loads with
    trust_remote_code, training resumes from it, and the checkpoints the remote-code model writes carry the code."""
    first = run["out"] / "checkpoint-4"
    assert MODEL_CODE | TOKENIZER_CODE <= set(os.listdir(first))
    out = tmp_path / "resumed"
    # The optimizer factory (torch/transformers, and the model helpers of the shipped modeling file) runs from its
    # source against the checkpoint's remote-code modeling module, so that the resumed run builds the same parameter
    # groups as the checkpointed one without importing the package.
    code = ISOLATED_PREAMBLE + textwrap.dedent(f"""
        import os, sys, types
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainingArguments
        checkpoint, out = {str(first)!r}, {{"importable": False}}
        model = AutoModelForSequenceClassification.from_pretrained(checkpoint, trust_remote_code=True)
        source = open({optimization.__file__!r}).read()
        shipped = "from ..models.modeling_multiencoder import multiencoder_base, parameter_members"
        assert shipped in source
        source = source.replace(shipped, "multiencoder_base, parameter_members = "
                                         "_shipped.multiencoder_base, _shipped.parameter_members")
        optimization = types.ModuleType("optimization")
        optimization._shipped = sys.modules[type(model).__module__]  # the checkpoint's own modeling file
        exec(compile(source, {optimization.__file__!r}, "exec"), optimization.__dict__)
        tokenizer = AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=True)
        with torch.no_grad():
            out["logits"] = model.eval()(**tokenizer({TEXTS!r}, padding=True, return_tensors="pt")).logits.tolist()
        encoded = tokenizer({(POS + NEG) * 4!r}, truncation=True, max_length=32)
        labels = {([1] * 4 + [0] * 4) * 4!r}
        train = [{{**{{k: v[b] for k, v in encoded.items()}}, "label": y}} for b, y in enumerate(labels)]
        args = TrainingArguments(output_dir={str(out)!r}, per_device_train_batch_size=8, learning_rate=1e-3,
                                 num_train_epochs=2, logging_steps=1, report_to=[], seed=0, use_cpu=True,
                                 save_strategy="epoch")
        optimizer = optimization.create_multiencoder_optimizer(model, args, encoder_learning_rates={ENCODER_LRS!r},
                                                               head_learning_rate={HEAD_LR!r})
        trainer = Trainer(model=model, args=args, train_dataset=train, processing_class=tokenizer,
                          data_collator=lambda features: dict(tokenizer.pad(features)), optimizers=(optimizer, None))
        trainer.train(resume_from_checkpoint=checkpoint)
        last = os.path.join(args.output_dir, f"checkpoint-{{trainer.state.global_step}}")
        out.update({{"module": type(model).__module__, "tokenizer": type(tokenizer).__module__,
                    "step": trainer.state.global_step, "last": last, "files": sorted(os.listdir(last))}})
        print(json.dumps(out))
    """)
    result = run_python(code, tmp_path, {"HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"})
    assert result["importable"] is False, "the subprocess must not see hf_multiencoder"
    assert result["module"].startswith("transformers_modules.") and result["tokenizer"].startswith(
        "transformers_modules.")
    expected = MultiEncoderForSequenceClassification.from_pretrained(first).eval()
    with torch.no_grad():
        expected_logits = expected(**run["tokenizer"](TEXTS, padding=True, return_tensors="pt")).logits
    torch.testing.assert_close(torch.tensor(result["logits"]), expected_logits, atol=1e-5, rtol=0)
    assert result["step"] == 8
    assert MODEL_CODE | TOKENIZER_CODE | {"config.json", "model.safetensors", "optimizer.pt"} <= set(result["files"])
    resumed = load_safetensors(Path(result["last"], "model.safetensors").read_bytes())
    for name, value in run["model"].state_dict().items():  # the same weights as the uninterrupted run
        torch.testing.assert_close(resumed[name], value, atol=1e-4, rtol=1e-3, msg=f"{name} differs after resuming")


def test_run_glue_multi_push_to_hub(hub, run, tmp_path):
    """`--push_to_hub` in the script: one commit with the model, tokenizer, code and card, then the pinned card."""
    import run_glue_multi

    data = tmp_path / "train.csv"
    data.write_text("sentence,label\n" + "".join(f"{s},1\n" for s in POS) + "".join(f"{s},0\n" for s in NEG))
    start = len(hub.commits)
    run_glue_multi.main([
        "--encoders", *MEMBERS[:2], "--encoder_names", *NAMES[:2], "--train_file", str(data), "--validation_file",
        str(data), "--output_dir", str(tmp_path / "out"), "--do_train", "--do_eval", "--num_train_epochs", "1",
        "--per_device_train_batch_size", "8", "--report_to", "none", "--use_cpu", "true", "--disable_tqdm", "true",
        "--save_strategy", "no", "--push_to_hub", "true", "--hub_model_id", "tiny-user/script-run"])
    # one push at the end (the final save does not push: it is written whole into the folder first), then the pin
    main, pin = hub.new_commits(start)
    assert main.message == "End of training"
    assert {"config.json", "model.safetensors", "tokenizer_config.json", "README.md", "all_results.json",
            "fusion_weights.json"} | MODEL_CODE | TOKENIZER_CODE <= set(main.files)
    card = ModelCard(pin.files["README.md"].decode())
    produced = json.loads((tmp_path / "out" / "eval_results.json").read_text())
    assert {(r.metric_type, r.metric_value) for r in card.data.eval_results} == {
        ("accuracy", produced["eval_accuracy"])}
    assert card.data.base_model == MEMBERS[:2] and f'revision = "{main.oid}"' in card.text
    assert f"| {POS[0]} |" in card.text  # the fusion weights of example sentences from the run's own data
    assert f'predict_with_fusion_weights(tokenizer, ["{POS[0]}"])' in card.text  # and the usage snippet
    assert 'pipeline("multiencoder-classification", model=model_id' in card.text and f'print(pipe("{POS[0]}"))' \
        in card.text  # the fusion-weights pipeline
