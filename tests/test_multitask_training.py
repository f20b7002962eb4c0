"""Training several tasks with the stock Trainer: the task sampler (schedules, seeds, processes, accumulation), the
MultiTaskTrainer (one task per step, loss weights, every task evaluated, best checkpoint by the combined score),
freezing, and the bad inputs. Tiny random members, a few optimizer steps."""

import json
import os
from types import SimpleNamespace

import pytest
import torch
from accelerate.data_loader import BatchSamplerShard
from datasets import Dataset, DatasetDict
from transformers import TrainerCallback, TrainingArguments

from hf_multiencoder import MultiEncoderForMultiTask, MultiEncoderTokenizer
from hf_multiencoder.data.tasks import TASKS, TaskSpec, register_task
from hf_multiencoder.training.multitask import (
    FreezeHeadsCallback,
    MultiTaskBatchSampler,
    MultiTaskDataCollator,
    MultiTaskDataset,
    MultiTaskTrainer,
    freeze_all_but_head,
    freeze_heads,
    load_multitask_data,
    task_heads,
    task_probabilities,
    trainable_tasks,
)

NAMES = ["bert", "roberta"]
SPECS = {"ner": TaskSpec("tiny_ner", kind="token", label_list=["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]),
         "acc": TaskSpec("tiny_acc", label_list=["unacceptable", "acceptable"])}
SENTENCES = ["the cat sat on the mat", "he can will go", "a dog runs quickly", "john smith is new",
             "she went to paris", "somebody just left"]
WORDS = [(["john", "smith", "went", "to", "paris"], [1, 2, 0, 0, 3]), (["the", "cat", "sat"], [0, 0, 0]),
         (["she", "likes", "new", "york"], [0, 0, 3, 4])]


@pytest.fixture(scope="module")
def tokenizer(tiny_paths):
    return MultiEncoderTokenizer.from_encoders(tiny_paths[:2], encoder_names=NAMES)


@pytest.fixture(scope="module")
def data(tokenizer):
    acc = Dataset.from_dict({"sentence1": SENTENCES * 4, "label": [1, 1, 0, 0, 1, 0] * 4})
    acc = acc.map(lambda b: dict(tokenizer(b["sentence1"], truncation=True, max_length=16)), batched=True,
                  remove_columns=["sentence1"])
    ner = Dataset.from_dict({"tokens": [w for w, _ in WORDS] * 12, "labels": [t for _, t in WORDS] * 12})
    ner = ner.map(lambda b: dict(tokenizer(b["tokens"], is_split_into_words=True, truncation=True, max_length=16)),
                  batched=True, remove_columns=["tokens"])
    return {"acc": acc, "ner": ner}


def new_model(tiny_paths):
    torch.manual_seed(0)
    return MultiEncoderForMultiTask.from_encoders(tiny_paths[:2], encoder_names=NAMES, fusion="dme",
                                                  tasks=task_heads(SPECS))


def make_trainer(model, tokenizer, data, out, **kwargs):
    trainer_kwargs = {k: kwargs.pop(k) for k in ("task_sampling", "sampling_temperature", "loss_weights",
                                                  "task_score_weights", "callbacks") if k in kwargs}
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=4, learning_rate=1e-3, report_to=[],
                             use_cpu=True, save_strategy=kwargs.pop("save_strategy", "no"), seed=0,
                             max_steps=kwargs.pop("max_steps", 4), disable_tqdm=True, weight_decay=0.0, **kwargs)
    return MultiTaskTrainer(model=model, args=args, train_dataset=data, eval_dataset=data, processing_class=tokenizer,
                            task_specs=SPECS, **trainer_kwargs)


# ---- sampling -------------------------------------------------------------------------------------------------------
SIZES = {"big": 900, "small": 100}


@pytest.mark.parametrize("sampling, expected", [
    ("proportional", 0.1), ("temperature", 10 / 40), ("uniform", 0.5)])
def test_probabilities(sampling, expected):
    assert task_probabilities(SIZES, sampling, temperature=2.0)["small"] == pytest.approx(expected)


def test_annealed_goes_from_proportional_to_alpha_0_2():
    assert task_probabilities(SIZES, "annealed", progress=0.0)["small"] == pytest.approx(0.1)
    assert task_probabilities(SIZES, "annealed", progress=1.0)["small"] == pytest.approx(
        100 ** 0.2 / (100 ** 0.2 + 900 ** 0.2))


@pytest.mark.parametrize("sampling", ["proportional", "temperature", "uniform", "annealed"])
def test_sampler_proportions_within_tolerance(sampling):
    sampler = MultiTaskBatchSampler(SIZES, batch_size=8, sampling=sampling, temperature=2.0, seed=3,
                                    steps_per_epoch=4000)
    tasks = sampler.step_tasks()
    for window in (slice(0, 1000), slice(3000, 4000)):
        steps = range(4000)[window]
        expected = sum(sampler.probabilities(s)["small"] for s in steps) / len(steps)
        observed = tasks[window].count("small") / len(steps)
        assert observed == pytest.approx(expected, abs=0.04), (sampling, window)
    assert sampler.task_counts(4000) == {"big": tasks.count("big"), "small": tasks.count("small")}


def test_sampler_batches_are_full_one_task_each_and_deterministic():
    sampler = MultiTaskBatchSampler({"a": 10, "b": 3}, batch_size=4, sampling="uniform", seed=7, batches_per_step=3,
                                    steps_per_epoch=12)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 36
    tasks = sampler.step_tasks()
    for i, batch in enumerate(batches):
        low, high = (0, 10) if tasks[i // 3] == "a" else (10, 13)
        assert len(batch) == 4 and all(low <= j < high for j in batch), (i, batch)
    # without replacement within a task until it runs out: the first 10 indices of task a are all different
    first_a = [j for batch, i in zip(batches, range(36)) if tasks[i // 3] == "a" for j in batch][:10]
    assert sorted(first_a) == list(range(10))
    assert list(sampler) == batches  # reproducible
    assert list(MultiTaskBatchSampler({"a": 10, "b": 3}, 4, "uniform", seed=8, batches_per_step=3,
                                      steps_per_epoch=12)) != batches
    sampler.set_epoch(1)
    assert list(sampler) != batches
    # the tasks of the steps do not depend on the batch size
    assert MultiTaskBatchSampler({"a": 10, "b": 3}, 2, "uniform", seed=7, steps_per_epoch=12).step_tasks() == tasks


def test_every_process_and_micro_batch_of_a_step_trains_the_same_task():
    processes, accumulation = 2, 3
    sampler = MultiTaskBatchSampler({"a": 50, "b": 20, "c": 9}, batch_size=2, sampling="uniform", seed=1,
                                    batches_per_step=processes * accumulation, steps_per_epoch=20)
    tasks = sampler.step_tasks()
    task_of = {i: name for name, start, n in (("a", 0, 50), ("b", 50, 20), ("c", 70, 9)) for i in range(start,
                                                                                                     start + n)}
    shards = [list(BatchSamplerShard(sampler, num_processes=processes, process_index=r)) for r in range(processes)]
    assert [len(s) for s in shards] == [20 * accumulation] * processes
    for rank, batches in enumerate(shards):
        for j, batch in enumerate(batches):
            assert {task_of[i] for i in batch} == {tasks[j // accumulation]}, (rank, j)
    assert sorted(map(tuple, shards[0] + shards[1])) == sorted(map(tuple, sampler))  # nothing lost or repeated


def test_sampler_bad_inputs():
    with pytest.raises(ValueError, match="Unknown task sampling 'random'"):
        MultiTaskBatchSampler(SIZES, 4, sampling="random")
    with pytest.raises(ValueError, match="needs training examples"):
        MultiTaskBatchSampler({"a": 10, "b": 0}, 4)
    with pytest.raises(ValueError, match="sampled_tasks must be some of the tasks"):
        MultiTaskBatchSampler(SIZES, 4, sampled_tasks=["tiny"])
    with pytest.raises(ValueError, match="must be positive"):
        task_probabilities(SIZES, "temperature", temperature=0)


# ---- data -----------------------------------------------------------------------------------------------------------
def test_dataset_and_collator(data, tokenizer):
    dataset = MultiTaskDataset(data)
    assert len(dataset) == 24 + 36 and dataset.task_sizes == {"acc": 24, "ner": 36}
    assert dataset[23]["task"] == "acc" and dataset[24]["task"] == "ner" and dataset.task_of(59) == "ner"
    collator = MultiTaskDataCollator(tokenizer)
    batch = collator([dataset[24], dataset[25]])
    assert batch["task"] == "ner" and batch["labels"].shape == (2, 5) and len(batch["word_ids"]) == 2
    with pytest.raises(ValueError, match=r"one task; this one has \['acc', 'ner'\]"):
        collator([dataset[0], dataset[30]])
    with pytest.raises(ValueError, match=r"have no examples"):
        MultiTaskDataset({"acc": data["acc"], "ner": data["ner"].select([])})


# ---- the Trainer ----------------------------------------------------------------------------------------------------
@pytest.mark.slow  # 6 optimizer steps of 2 micro-batches
def test_one_task_per_step_under_gradient_accumulation(tiny_paths, tokenizer, data, tmp_path):
    model = new_model(tiny_paths)
    seen = []
    model.register_forward_pre_hook(lambda module, args, kwargs: seen.append(kwargs["task"]), with_kwargs=True)
    trainer = make_trainer(model, tokenizer, data, tmp_path, task_sampling="uniform", max_steps=6,
                           gradient_accumulation_steps=2)
    trainer.train()
    step_tasks = trainer.task_sampler.step_tasks(0)[:6]
    assert seen == [task for task in step_tasks for _ in range(2)]
    assert set(step_tasks) == {"acc", "ner"}
    assert trainer.task_sampler.task_counts(6) == {t: step_tasks.count(t) for t in ("acc", "ner")}


def test_loss_weights_scale_the_training_loss_only(tiny_paths, tokenizer, data, tmp_path):
    model = new_model(tiny_paths)
    trainer = make_trainer(model, tokenizer, data, tmp_path, loss_weights={"ner": 0.25})
    batch = MultiTaskDataCollator(tokenizer)([MultiTaskDataset(data)[i] for i in (24, 25, 26)])
    model.eval()
    with torch.no_grad():
        plain = model(**batch).loss
        assert trainer.compute_loss(model, batch).item() == pytest.approx(plain.item())  # evaluation: unweighted
    model.train()
    torch.manual_seed(0)
    weighted = trainer.compute_loss(model, dict(batch))
    torch.manual_seed(0)
    assert weighted.item() == pytest.approx(0.25 * model(**batch).loss.item())


@pytest.mark.slow  # 6 steps, 3 evaluations and checkpoints
def test_evaluate_every_task_and_keep_the_best_combined_score(tiny_paths, tokenizer, data, tmp_path):
    model = new_model(tiny_paths)
    trainer = make_trainer(model, tokenizer, data, tmp_path, max_steps=6, eval_strategy="steps", eval_steps=2,
                           save_strategy="steps", save_steps=2, load_best_model_at_end=True,
                           metric_for_best_model="multitask_score", task_score_weights={"ner": 3.0, "acc": 1.0})
    trainer.train()
    history = [e for e in trainer.state.log_history if "eval_multitask_score" in e]
    assert len(history) == 3
    for entry in history:
        assert {"eval_acc_accuracy", "eval_acc_loss", "eval_ner_overall_f1", "eval_ner_loss", "eval_loss",
                "eval_acc_fusion_weight_bert", "eval_ner_fusion_weight_roberta"} <= set(entry)
        expected = (3 * entry["eval_ner_overall_f1"] + entry["eval_acc_accuracy"]) / 4
        assert entry["eval_multitask_score"] == pytest.approx(expected)
        assert entry["eval_loss"] == pytest.approx((entry["eval_acc_loss"] + entry["eval_ner_loss"]) / 2)
    best = max(history, key=lambda e: e["eval_multitask_score"])
    assert trainer.state.best_metric == pytest.approx(best["eval_multitask_score"])
    assert trainer.state.best_model_checkpoint.endswith(f"checkpoint-{best['step']}")
    assert trainer.describe_score() == "weighted mean of 3 x ner overall_f1, 1 x acc accuracy"
    only_acc = trainer.evaluate(eval_dataset="acc")
    assert "eval_acc_accuracy" in only_acc and "eval_ner_loss" not in only_acc
    card = trainer.model_card_data
    assert card.task_results["validation"]["ner"]["overall_f1"] == pytest.approx(history[-1]["eval_ner_overall_f1"])
    assert set(card.task_fusion_weights["validation"]["acc"]) == set(NAMES)


def test_frozen_heads_do_not_change(tiny_paths, tokenizer, data, tmp_path):
    model = new_model(tiny_paths)
    frozen = freeze_heads(model, ["acc"])
    assert frozen == ["acc"]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = make_trainer(model, tokenizer, data, tmp_path, task_sampling="uniform", max_steps=6)
    trainer.train()
    assert "acc" in trainer.task_sampler.step_tasks(0)[:6]
    for name, p in model.named_parameters():
        if name.startswith("heads.acc."):
            assert torch.equal(p, before[name]), name
    assert not torch.equal(model.heads.ner.weight, before["heads.ner.weight"])
    assert not torch.equal(model.multiencoder.fusion.scorer.weight, before["multiencoder.fusion.scorer.weight"])


def test_a_frozen_member_does_not_change_while_the_rest_trains(tiny_paths, tokenizer, data, tmp_path):
    """`freeze: {encoders: [...]}` in a multi-task run: the shared `freeze_encoders` on the multi-task model."""
    import run_multitask

    model = new_model(tiny_paths)
    model_args = SimpleNamespace(freeze_encoders=None)
    task_args = SimpleNamespace(freeze={"encoders": [NAMES[0]]})
    assert run_multitask.apply_freezing(model, model_args, task_args) == []
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    make_trainer(model, tokenizer, data, tmp_path, task_sampling="uniform", max_steps=4).train()
    member = model.multiencoder.encoders[0]
    assert not any(p.requires_grad for p in member.parameters())
    for name, p in model.named_parameters():
        if name.startswith("multiencoder.encoders.0."):
            assert torch.equal(p, before[name]), name
    assert not torch.equal(model.multiencoder.encoders[1].embeddings.word_embeddings.weight,
                           before["multiencoder.encoders.1.embeddings.word_embeddings.weight"])


@pytest.mark.slow  # two trainings
def test_head_frozen_after_some_steps_keeps_its_weights_from_then_on(tiny_paths, tokenizer, data, tmp_path):
    model = new_model(tiny_paths)
    initial = model.heads.ner.weight.detach().clone()
    snapshots = {}

    class Snapshot(TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, **kwargs):
            snapshots.setdefault(state.global_step, model.heads.ner.weight.detach().clone())

    trainer = make_trainer(model, tokenizer, data, tmp_path, max_steps=6,
                           callbacks=[FreezeHeadsCallback({"ner": 3}), Snapshot()])
    trainer.train()
    tasks = trainer.task_sampler.step_tasks(0)[:6]
    assert "ner" in tasks[:3] and "ner" in tasks[3:], tasks  # proportional: ner has most of the data
    assert not torch.equal(snapshots[3], initial)  # trained before the freeze
    assert torch.equal(model.heads.ner.weight, snapshots[3])  # not after
    assert not model.heads.ner.weight.requires_grad
    with pytest.raises(ValueError, match="Unknown task 'pos'"):
        make_trainer(new_model(tiny_paths), tokenizer, data, tmp_path,
                     callbacks=[FreezeHeadsCallback({"pos": 1})]).train()


def test_everything_but_one_head_frozen(tiny_paths, tokenizer, data, tmp_path):
    model = new_model(tiny_paths)
    trainable = freeze_all_but_head(model, "acc")
    assert trainable == ["heads.acc.weight", "heads.acc.bias"]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = make_trainer(model, tokenizer, data, tmp_path, task_sampling="uniform", max_steps=4)
    trainer.train()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed == {"heads.acc.weight", "heads.acc.bias"}
    assert trainable_tasks(model) == ["acc"] and trainer.task_sampler.task_counts(4) == {"acc": 4}
    freeze_heads(model, ["acc"])
    with pytest.raises(ValueError, match="Nothing to train"):
        make_trainer(model, tokenizer, data, tmp_path).train()


def test_trainer_bad_inputs(tiny_paths, tokenizer, data, tmp_path):
    model = new_model(tiny_paths)
    with pytest.raises(ValueError, match=r"loss_weights name\(s\) task\(s\) \['pos'\]"):
        make_trainer(model, tokenizer, data, tmp_path, loss_weights={"pos": 2.0})
    with pytest.raises(ValueError, match=r"data name\(s\) task\(s\) \['pos'\]"):
        make_trainer(model, tokenizer, {**data, "pos": data["acc"]}, tmp_path)
    with pytest.raises(ValueError, match="non-negative"):
        make_trainer(model, tokenizer, data, tmp_path, loss_weights={"ner": -1.0})
    with pytest.raises(ValueError, match="Unknown task sampling"):
        make_trainer(model, tokenizer, data, tmp_path, task_sampling="round_robin")
    with pytest.raises(ValueError, match="pass eval_dataset as a mapping"):
        MultiTaskTrainer(model=model, args=TrainingArguments(str(tmp_path), report_to=[], use_cpu=True),
                         eval_dataset=data["acc"], processing_class=tokenizer)
    with pytest.raises(ValueError, match="Unknown task 'pos'"):
        freeze_heads(model, ["pos"])


# ---- data from the registry -----------------------------------------------------------------------------------------
def test_a_task_without_data(tokenizer, tmp_path, hub_offline):
    hub_offline(True)
    with pytest.raises(FileNotFoundError, match="Task 'trec'.*not found"):
        load_multitask_data({"q": "trec"}, tokenizer, data_dir=str(tmp_path))

    def reader(spec, path):
        return DatasetDict({"train": Dataset.from_dict({"sentence1": [], "label": []}),
                            "validation": Dataset.from_dict({"sentence1": ["a"], "label": [0]})})

    os.makedirs(tmp_path / "empty_task")
    register_task(TaskSpec("empty_task", label_list=["x", "y"], reader=reader), overwrite=True)
    try:
        with pytest.raises(ValueError, match="Task 'e' \\(empty_task\\) has no training examples"):
            load_multitask_data({"e": "empty_task"}, tokenizer, data_dir=str(tmp_path))
    finally:
        del TASKS["empty_task"]


DISTRIBUTED_SCRIPT = '''
import json, os, sys
import torch
from datasets import Dataset
from transformers import TrainingArguments
from hf_multiencoder import MultiEncoderForMultiTask, MultiEncoderTokenizer
from hf_multiencoder.training.multitask import MultiTaskTrainer, task_heads
from hf_multiencoder.data.tasks import TaskSpec

paths, out = sys.argv[1:3], sys.argv[3]
rank = int(os.environ["RANK"])
specs = {"ner": TaskSpec("tiny_ner", kind="token", label_list=["O", "B-PER", "I-PER"]),
         "acc": TaskSpec("tiny_acc", label_list=["no", "yes"])}
tok = MultiEncoderTokenizer.from_encoders(paths, encoder_names=["bert", "roberta"])
acc = Dataset.from_dict({"sentence1": ["the cat sat", "he can will go", "a dog runs", "john left"] * 5,
                         "label": [1, 0, 1, 0] * 5})
acc = acc.map(lambda b: dict(tok(b["sentence1"])), batched=True, remove_columns=["sentence1"])
ner = Dataset.from_dict({"tokens": [["john", "smith", "went"], ["the", "cat"]] * 10,
                         "labels": [[1, 2, 0], [0, 0]] * 10})
ner = ner.map(lambda b: dict(tok(b["tokens"], is_split_into_words=True)), batched=True, remove_columns=["tokens"])
torch.manual_seed(0)
model = MultiEncoderForMultiTask.from_encoders(paths, encoder_names=["bert", "roberta"], tasks=task_heads(specs))
seen = []
model.register_forward_pre_hook(lambda m, a, kw: seen.append(kw["task"]) if m.training else None, with_kwargs=True)
args = TrainingArguments(output_dir=out, per_device_train_batch_size=2, gradient_accumulation_steps=2, max_steps=5,
                         learning_rate=1e-3, report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True, seed=0)
trainer = MultiTaskTrainer(model=model, args=args, train_dataset={"acc": acc, "ner": ner}, processing_class=tok,
                           task_specs=specs, task_sampling="uniform")
trainer.train()
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump({"seen": seen, "steps": trainer.task_sampler.step_tasks(0)[:5], "world": args.world_size,
               "head": model.heads["acc"].weight.sum().item(),
               "scorer": model.multiencoder.fusion.scorer.weight.sum().item()}, f)
torch.distributed.barrier()  # neither process tears gloo down while the other is still in a collective
torch.distributed.destroy_process_group()  # gloo's threads joined before exit (else std::terminate, SIGABRT)
'''


@pytest.mark.slow  # two processes (torchrun, gloo on the CPU)
def test_two_processes_train_the_same_task_in_every_step(tiny_paths, tmp_path, torchrun):
    script = tmp_path / "train.py"
    script.write_text(DISTRIBUTED_SCRIPT)
    torchrun(script, *tiny_paths[:2], tmp_path, log_dir=tmp_path / "logs", timeout=600)
    ranks = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(2)]
    assert [r["world"] for r in ranks] == [2, 2]
    steps = ranks[0]["steps"]
    assert ranks[1]["steps"] == steps and set(steps) == {"acc", "ner"}
    for rank in ranks:  # every micro-batch of every step on every process: that step's task
        assert rank["seen"] == [task for task in steps for _ in range(2)]
    # the processes stayed in sync (DDP averaged the same task's gradients)
    assert ranks[0]["head"] == pytest.approx(ranks[1]["head"]) and ranks[0]["scorer"] == pytest.approx(
        ranks[1]["scorer"])
