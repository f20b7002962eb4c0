"""FSDP settings on one process: accelerate's auto-wrap finds the members' layer classes through the model's
`_no_split_modules`, the shipped accelerate configs load, and a layer class the model lacks is a clear error. The
sharded training itself runs in tests/test_distributed.py (FSDP2 on the CPU, 2 processes)."""

import os

import pytest
from accelerate.utils import FullyShardedDataParallelPlugin

from hf_multiencoder import MultiEncoderForSequenceClassification, MultiEncoderForTokenClassification
from hf_multiencoder.training.distributed import check_fsdp_layer_classes

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def model(tiny_paths):
    return MultiEncoderForSequenceClassification.from_encoders(tiny_paths, encoder_names=["bert", "roberta", "distil"],
                                                               num_labels=2)


def test_no_split_modules_are_the_members_layer_classes(model, tiny_paths):
    # BERT and RoBERTa declare theirs; DistilBERT declares none: its repeated block
    assert set(model._no_split_modules) == {"BertEmbeddings", "BertLayer", "RobertaEmbeddings", "RobertaLayer",
                                            "TransformerBlock"}
    assert set(MultiEncoderForTokenClassification.from_encoders(tiny_paths[2:], num_labels=3)._no_split_modules) == {
        "TransformerBlock"}  # per instance: another model, other classes
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, auto_wrap_policy="transformer_based_wrap")
    plugin.set_auto_wrap_policy(model)  # what accelerate does with the Trainer's model
    assert {c.__name__ for c in plugin.auto_wrap_policy.keywords["transformer_layer_cls"]} == set(
        model._no_split_modules)


def test_fsdp_layer_class_not_in_the_model(model):
    assert check_fsdp_layer_classes(model, "BertLayer, TransformerBlock") == ["BertLayer", "TransformerBlock"]
    assert set(check_fsdp_layer_classes(model, None)) == set(model._no_split_modules)
    with pytest.raises(ValueError, match=r"\['MPNetLayer'\] are not in this model.*bert: BertEmbeddings, BertLayer; "
                                         r"roberta: RobertaEmbeddings, RobertaLayer; distil: TransformerBlock"):
        check_fsdp_layer_classes(model, ["BertLayer", "MPNetLayer"])


def test_shipped_accelerate_configs_load():
    from accelerate.commands.config.config_args import load_config_from_file

    fsdp = load_config_from_file(os.path.join(REPO, "configs", "accelerate", "fsdp.yaml"))
    assert fsdp.distributed_type == "FSDP" and fsdp.fsdp_config["fsdp_version"] == 2
    assert fsdp.fsdp_config["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    ddp = load_config_from_file(os.path.join(REPO, "configs", "accelerate", "ddp.yaml"))
    assert ddp.distributed_type == "MULTI_GPU" and ddp.num_processes == 8


def test_the_trainer_checks_fsdp_layer_classes_at_start(model, monkeypatch, tmp_path):
    """Under FSDP (GPU-only in accelerate; faked here on the accelerator state) `MultiEncoderTrainer` refuses a layer
    class to wrap that the model lacks when it is built, not at the first step."""
    from types import SimpleNamespace

    from transformers import Trainer, TrainingArguments

    from hf_multiencoder import MultiEncoderTrainer

    original = Trainer.create_accelerator_and_postprocess

    def with_fsdp(self):
        original(self)
        plugin = SimpleNamespace(transformer_cls_names_to_wrap=["BertLayer", "MPNetLayer"],
                                 activation_checkpointing=False, state_dict_type="FULL_STATE_DICT")
        monkeypatch.setattr(self.accelerator.state, "fsdp_plugin", plugin, raising=False)
        self.is_fsdp_enabled = True

    monkeypatch.setattr(Trainer, "create_accelerator_and_postprocess", with_fsdp)
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    with pytest.raises(ValueError, match=r"\['MPNetLayer'\] are not in this model"):
        MultiEncoderTrainer(model=model, args=args)
