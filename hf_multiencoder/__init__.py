"""hf_multiencoder: tune several pretrained Hugging Face encoders together as one model.

Importing the package registers the config, models and tokenizer with the Auto classes, and marks them so that
``save_pretrained``/``push_to_hub`` ship the code files and write ``auto_map`` (``trust_remote_code=True`` loading
where this package is not installed).
"""

import importlib

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)

from .configuration_multiencoder import MultiEncoderConfig
from .configuration_multiencoder_multitask import MultiEncoderMultiTaskConfig
from .data_collator import MultiEncoderDataCollator
from .fusion_multiencoder import FUSION_MAPPING, Fusion, build_fusion
from .modeling_multiencoder import (
    MultiEncoderForSequenceClassification,
    MultiEncoderForTokenClassification,
    MultiEncoderModel,
    MultiEncoderModelOutput,
    MultiEncoderPreTrainedModel,
    MultiEncoderSequenceClassifierOutput,
    MultiEncoderTokenClassifierOutput,
    mean_fusion_weights,
)
from .modeling_multiencoder_multitask import MultiEncoderForMultiTask, MultiEncoderMultiTaskModel
from .optimization import create_multiencoder_optimizer, freeze_encoders
from .tasks import TaskSpec, get_task, register_task
from .tokenization_multiencoder import MultiEncoderBatch, MultiEncoderTokenizer

__version__ = "0.1.0"

# Training-side names that pull in heavy modules (the Trainer, `datasets`, scipy): imported on first use, so that
# `import hf_multiencoder` for inference stays as light as transformers itself (PEP 562, as transformers' lazy module).
_LAZY_IMPORTS = {
    "MultiEncoderTrainer": "hub",
    "push_multiencoder_to_hub": "hub",
    "load_task": "data",
    "MultiTaskTrainer": "multitask",
    "tokenize_task": "data",
    "adapt_members": "adaptation",
    "load_corpus": "corpus",
    # sentence-transformers (an optional extra): imported only when these are used
    "save_sentence_transformer": "sentence_embeddings",
    "to_sentence_transformer": "sentence_embeddings",
}


def __getattr__(name: str):
    if name in _LAZY_IMPORTS:
        value = getattr(importlib.import_module(f".{_LAZY_IMPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY_IMPORTS))


AutoConfig.register(MultiEncoderConfig.model_type, MultiEncoderConfig, exist_ok=True)
AutoModel.register(MultiEncoderConfig, MultiEncoderModel, exist_ok=True)
AutoModelForSequenceClassification.register(MultiEncoderConfig, MultiEncoderForSequenceClassification, exist_ok=True)
AutoModelForTokenClassification.register(MultiEncoderConfig, MultiEncoderForTokenClassification, exist_ok=True)
AutoTokenizer.register(MultiEncoderConfig, tokenizer_class=MultiEncoderTokenizer, exist_ok=True)
AutoConfig.register(MultiEncoderMultiTaskConfig.model_type, MultiEncoderMultiTaskConfig, exist_ok=True)
AutoModel.register(MultiEncoderMultiTaskConfig, MultiEncoderForMultiTask, exist_ok=True)
AutoTokenizer.register(MultiEncoderMultiTaskConfig, tokenizer_class=MultiEncoderTokenizer, exist_ok=True)

MultiEncoderConfig.register_for_auto_class()
MultiEncoderModel.register_for_auto_class("AutoModel")
MultiEncoderForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
MultiEncoderForTokenClassification.register_for_auto_class("AutoModelForTokenClassification")
MultiEncoderTokenizer.register_for_auto_class("AutoTokenizer")
MultiEncoderMultiTaskConfig.register_for_auto_class()
MultiEncoderForMultiTask.register_for_auto_class("AutoModel")

__all__ = [
    "FUSION_MAPPING",
    "Fusion",
    "MultiEncoderBatch",
    "MultiEncoderConfig",
    "MultiEncoderDataCollator",
    "MultiEncoderForMultiTask",
    "MultiEncoderForSequenceClassification",
    "MultiEncoderForTokenClassification",
    "MultiEncoderModel",
    "MultiEncoderModelOutput",
    "MultiEncoderMultiTaskConfig",
    "MultiEncoderMultiTaskModel",
    "MultiEncoderPreTrainedModel",
    "MultiEncoderSequenceClassifierOutput",
    "MultiEncoderTokenClassifierOutput",
    "MultiEncoderTokenizer",
    "MultiEncoderTrainer",
    "MultiTaskTrainer",
    "TaskSpec",
    "adapt_members",
    "build_fusion",
    "create_multiencoder_optimizer",
    "freeze_encoders",
    "get_task",
    "load_corpus",
    "load_task",
    "mean_fusion_weights",
    "push_multiencoder_to_hub",
    "register_task",
    "save_sentence_transformer",
    "to_sentence_transformer",
    "tokenize_task",
]
