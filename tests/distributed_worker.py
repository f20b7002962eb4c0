"""What tests/test_distributed.py runs in every process under `torchrun --nproc_per_node 2` (CPU, gloo), and in-process
with one process for the reference: tiny members, the stock Trainer machinery (MultiEncoderTrainer), the optimizer
factory, DDP without `find_unused_parameters`.

    torchrun --nproc_per_node 2 tests/distributed_worker.py TINY_DIR OUT_DIR

Writes, from the main process, `OUT_DIR/summary.json` and the tensors the test compares with its one-process run.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch
from datasets import Dataset
from torch import nn
from transformers import TrainingArguments

from hf_multiencoder import (
    MultiEncoderDataCollator,
    MultiEncoderForSequenceClassification,
    MultiEncoderForTokenClassification,
    MultiEncoderTokenizer,
    MultiEncoderTrainer,
    create_multiencoder_optimizer,
    freeze_encoders,
)
from hf_multiencoder.training.metrics import build_compute_metrics

WORDS = ("the cat sat on the mat a dog runs she can go he went to paris john smith is new it was 2024 in york "
         "somebody just left likes quickly").split()
STEPS = 4  # optimizer steps of the equivalence runs
EXAMPLES = 48  # a multiple of the global batch (8): every step sees the same 8 examples in both runs
EVAL_EXAMPLES = 13  # per-device eval batch 4 on 2 processes: the last global batch (5) splits unevenly


def sentences(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 11)))) for _ in range(n)]


def sequence_data(tokenizer, n: int, seed: int) -> Dataset:
    texts = sentences(n, seed)
    ds = Dataset.from_dict({"sentence": texts, "label": [int("cat" in t) for t in texts]})
    return ds.map(lambda b: dict(tokenizer(b["sentence"], truncation=True, max_length=32)), batched=True,
                  remove_columns=["sentence"])


def token_data(tokenizer, n: int, seed: int) -> Dataset:
    words = [t.split() for t in sentences(n, seed)]
    enc = tokenizer(words, is_split_into_words=True, truncation=True, max_length=32)
    return Dataset.from_dict({**dict(enc), "labels": [[int(w == "cat") for w in ws] for ws in words]})


def build(paths, kind: str = "sequence", frozen=()):
    """A tiny fused model without dropout (so two runs can match), seeded."""
    torch.manual_seed(0)
    cls = MultiEncoderForTokenClassification if kind == "token" else MultiEncoderForSequenceClassification
    model = cls.from_encoders(paths, encoder_names=["bert", "roberta", "distil"][:len(paths)], fusion="dme",
                              num_labels=2)
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    if frozen:
        freeze_encoders(model, frozen)
    return model


def trainer_for(model, tokenizer, out, per_device: int, **kwargs):
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=per_device,
                             per_device_eval_batch_size=4, learning_rate=1e-3, max_steps=STEPS, logging_steps=1,
                             report_to=[], seed=0, use_cpu=True, save_strategy=kwargs.pop("save_strategy", "no"),
                             ddp_find_unused_parameters=False, disable_tqdm=True, dataloader_pin_memory=False,
                             **kwargs)
    optimizer = create_multiencoder_optimizer(model, args, head_learning_rate=3e-3)
    return MultiEncoderTrainer(model=model, args=args, processing_class=tokenizer, optimizers=(optimizer, None),
                               data_collator=MultiEncoderDataCollator(tokenizer))


def train(paths, tokenizer, out, per_device: int, frozen=(), resume: str | None = None, **kwargs):
    """`STEPS` optimizer steps over `EXAMPLES` examples; returns the final weights (CPU tensors by name)."""
    model = build(paths, frozen=frozen)
    trainer = trainer_for(model, tokenizer, out, per_device, **kwargs)
    trainer.train_dataset = sequence_data(tokenizer, EXAMPLES, seed=1)
    trainer.train(resume_from_checkpoint=resume)
    return {n: p.detach().clone() for n, p in model.named_parameters()}, trainer


def predict(paths, tokenizer, kind: str, out):
    """Predictions and metrics over `EVAL_EXAMPLES` examples, gathered from every process."""
    model = build(paths, kind=kind)
    trainer = trainer_for(model, tokenizer, out, 4)
    trainer.compute_metrics = build_compute_metrics("conll2003" if kind == "token" else "sst2",
                                                    model.config.encoder_names)
    data = (token_data if kind == "token" else sequence_data)(tokenizer, EVAL_EXAMPLES, seed=2)
    return trainer.predict(data)


def fsdp_train(paths, tokenizer, shard: bool) -> dict:
    """`STEPS` steps of FSDP2 as accelerate prepares it for the Trainer on GPUs (`fsdp2_prepare_model`: a unit per
    class in the model's `_no_split_modules`), on the CPU, a frozen member; returns the full final weights (on the
    main process). `shard=False`: the same steps in one process, unsharded, on the whole global batch."""
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_model
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import FSDPModule

    model = build(paths, frozen=(2,))
    rank, world = (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])) if shard else (0, 1)
    if shard:
        plugin = FullyShardedDataParallelPlugin(fsdp_version=2, auto_wrap_policy="transformer_based_wrap",
                                                cpu_ram_efficient_loading=False, reshard_after_forward=True)
        accelerator = type("CPUAccelerator", (), {"state": type("State", (), {"fsdp_plugin": plugin})(),
                                                  "mixed_precision": "no", "is_main_process": rank == 0,
                                                  "device": torch.device("cpu")})()
        model = fsdp2_prepare_model(accelerator, model)
        units = sorted({type(m).__name__ for m in model.modules() if isinstance(m, FSDPModule)})
    optimizer = create_multiencoder_optimizer(model, learning_rate=1e-3, head_learning_rate=3e-3)
    data = sequence_data(tokenizer, 8 * STEPS, seed=5)
    collator = MultiEncoderDataCollator(tokenizer)
    model.train()
    for step in range(STEPS):
        rows = [data[i] for i in range(8 * step, 8 * step + 8)][rank::world]  # each process its share
        model(**collator(rows)).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    if not shard:
        return {n: p.detach().clone() for n, p in model.named_parameters()}
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {"weights": full, "units": units}


def main(tiny_dir: str, out: str) -> None:
    import torch.distributed as dist

    import run_glue_multi
    from hf_multiencoder.data import feature_cache
    from hf_multiencoder.models.modeling_multiencoder import MultiEncoderPreTrainedModel, parameter_members

    paths = [os.path.join(tiny_dir, name) for name in ("tiny-bert", "tiny-roberta", "tiny-distilbert")]
    tokenizer = MultiEncoderTokenizer.from_encoders(paths, encoder_names=["bert", "roberta", "distil"])
    rank = int(os.environ["RANK"])
    summary: dict = {"world_size": int(os.environ["WORLD_SIZE"])}

    saves = []  # which process writes model weights
    original_save = MultiEncoderPreTrainedModel.save_pretrained

    def counting_save(self, *args, **kwargs):
        saves.append(rank)
        return original_save(self, *args, **kwargs)

    MultiEncoderPreTrainedModel.save_pretrained = counting_save

    # 1. equivalence: 2 processes x 4 examples per step = 1 process x 8; a frozen member; checkpoints every 2 steps
    weights, trainer = train(paths, tokenizer, os.path.join(out, "ddp"), per_device=4, frozen=(2,),
                             save_strategy="steps", save_steps=2)
    wrapped = trainer.model_wrapped
    summary["wrapped"] = type(wrapped).__name__
    members = parameter_members(wrapped)  # through the DDP wrapper, by identity
    summary["members_through_ddp"] = sorted({v for v in members.values() if v is not None})
    summary["groups_through_ddp"] = [g["name"] for g in create_multiencoder_optimizer(wrapped).param_groups]
    summary["saves_during_training"] = sorted(saves)
    # 2. resume from the step-2 checkpoint in a fresh trainer: the same final weights
    resumed, _ = train(paths, tokenizer, os.path.join(out, "resumed"), per_device=4, frozen=(2,),
                       resume=os.path.join(out, "ddp", "checkpoint-2"))
    # 3. evaluation: gathered predictions, an uneven last batch, sentence and word level
    seq = predict(paths, tokenizer, "sequence", os.path.join(out, "eval"))
    tok = predict(paths, tokenizer, "token", os.path.join(out, "eval_tok"))
    # 4. the feature cache is computed by one process, read by the other
    calls = []
    original_encode = feature_cache._encode_batch

    def counting_encode(*args, **kwargs):
        calls.append(rank)
        return original_encode(*args, **kwargs)

    feature_cache._encode_batch = counting_encode
    frozen_model = build(paths, frozen=(1,))
    data = sequence_data(tokenizer, 20, seed=3)
    cached = feature_cache.add_member_features(data, frozen_model, members=[1], cache_dir=os.path.join(out, "cache"))
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, {"rank": rank, "encode_calls": len(calls),
                                      "first_vector": cached[0]["encoder_features"][1][:4]})
    # 5. the script itself, with LoRA (merged at the end, adapters beside it)
    saves.clear()
    csv_dir = os.path.join(out, "csv")
    if rank == 0:
        os.makedirs(csv_dir, exist_ok=True)
        texts = sentences(40, seed=4)
        for name, rows in (("train.csv", texts[:32]), ("dev.csv", texts[32:])):
            with open(os.path.join(csv_dir, name), "w") as f:
                f.write("sentence,label\n" + "".join(f"{t},{int('cat' in t)}\n" for t in rows))
    dist.barrier()
    script_args = [
        "--encoders", *paths[:2], "--encoder_names", "bert", "roberta", "--output_dir", os.path.join(out, "script"),
        "--train_file", os.path.join(csv_dir, "train.csv"), "--validation_file", os.path.join(csv_dir, "dev.csv"),
        "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "3", "--learning_rate", "1e-3",
        "--num_train_epochs", "1", "--report_to", "none", "--disable_tqdm", "true", "--use_cpu", "true",
        "--max_seq_length", "32", "--ddp_find_unused_parameters", "false", "--lora_r", "4", "--save_strategy",
        "epoch", "--eval_strategy", "epoch"]
    table = run_glue_multi.main(script_args)
    script_saves = list(saves)
    # 5b. the same command resumed once the run is finished: nothing trained or saved again, the same scores
    saves.clear()
    resumed_table = run_glue_multi.main([*script_args, "--resume_from_checkpoint", "true"])
    resumed_saves = [None] * dist.get_world_size()
    dist.all_gather_object(resumed_saves, list(saves))
    # 6. FSDP2 as accelerate prepares it, on the CPU
    fsdp = fsdp_train(paths, tokenizer, shard=True)
    all_saves = [None] * dist.get_world_size()
    dist.all_gather_object(all_saves, script_saves)
    if rank == 0:
        torch.save({"weights": weights, "resumed": resumed, "fsdp": fsdp["weights"]}, os.path.join(out, "weights.pt"))
        summary["fsdp_units"] = fsdp["units"]
        np.savez(os.path.join(out, "predictions.npz"), seq_logits=seq.predictions[0], seq_weights=seq.predictions[1],
                 tok_logits=tok.predictions[0], tok_weights=tok.predictions[1], tok_mask=tok.predictions[2])
        summary.update({"seq_metrics": seq.metrics, "tok_metrics": tok.metrics, "cache": gathered,
                        "script_table": table, "script_saves": all_saves, "script_resumed_table": resumed_table,
                        "script_resumed_saves": resumed_saves})
        with open(os.path.join(out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2, default=str)
    dist.barrier()
    dist.destroy_process_group()  # gloo's threads joined before the interpreter exits (else std::terminate, SIGABRT)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run_glue_multi.py
    main(sys.argv[1], sys.argv[2])
