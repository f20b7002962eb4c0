"""hf_multiencoder: tune several pretrained Hugging Face encoders together as one model.

Importing the package registers the config, models and tokenizer with the Auto classes, and marks them so that
``save_pretrained``/``push_to_hub`` ship the code files and write ``auto_map`` (``trust_remote_code=True`` loading
where this package is not installed).

Layout: `models/` is the code saved beside the weights (torch and transformers only); `training/` the Trainer, run
folders, optimizer, metrics, model card, LoRA, multi-task training; `data/` the task registry, readers, collator,
feature cache and corpora; `pretraining/` member adaptation and replaced-token detection; `deploy/` the ONNX export.
"""

import importlib

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)

from .data.data_collator import MultiEncoderDataCollator
from .data.tasks import TaskSpec, get_task, register_task
from .models.configuration_multiencoder import MultiEncoderConfig
from .models.configuration_multiencoder_multitask import MultiEncoderMultiTaskConfig
from .models.fusion_multiencoder import FUSION_MAPPING, Fusion, build_fusion
from .models.modeling_multiencoder import (
    MultiEncoderForSequenceClassification,
    MultiEncoderForTokenClassification,
    MultiEncoderModel,
    MultiEncoderModelOutput,
    MultiEncoderPreTrainedModel,
    MultiEncoderSequenceClassifierOutput,
    MultiEncoderTokenClassifierOutput,
    mean_fusion_weights,
)
from .models.modeling_multiencoder_multitask import MultiEncoderForMultiTask, MultiEncoderMultiTaskModel
from .models.pipeline_multiencoder import (
    MultiEncoderClassificationPipeline,
    MultiEncoderNerPipeline,
    register_pipelines,
)
from .models.tokenization_multiencoder import MultiEncoderBatch, MultiEncoderTokenizer
from .training.optimization import create_multiencoder_optimizer, freeze_encoders

__version__ = "0.1.0"

# Training-side names that pull in heavy modules (the Trainer, `datasets`, scipy): imported on first use, so that
# `import hf_multiencoder` for inference stays as light as transformers itself (PEP 562, as transformers' lazy module).
_LAZY_IMPORTS = {
    "MultiEncoderTrainer": "training.trainer",
    "push_multiencoder_to_hub": "training.trainer",
    "load_task": "data.loading",
    "MultiTaskTrainer": "training.multitask",
    "tokenize_task": "data.loading",
    "adapt_members": "pretraining.adaptation",
    "load_corpus": "data.corpus",
    # sentence-transformers (an optional extra): imported only when these are used
    "save_sentence_transformer": "training.sentence_embeddings",
    "to_sentence_transformer": "training.sentence_embeddings",
    # ONNX export and onnxruntime inference (the onnx extra)
    "export_onnx": "deploy.onnx",
    "OnnxMultiEncoder": "deploy.onnx",
    "quantize_onnx": "deploy.onnx",
    "distill": "training.distill",
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
register_pipelines()  # "multiencoder-classification", "multiencoder-ner"
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
    "MultiEncoderClassificationPipeline",
    "MultiEncoderConfig",
    "MultiEncoderDataCollator",
    "MultiEncoderForMultiTask",
    "MultiEncoderForSequenceClassification",
    "MultiEncoderForTokenClassification",
    "MultiEncoderModel",
    "MultiEncoderNerPipeline",
    "MultiEncoderModelOutput",
    "MultiEncoderMultiTaskConfig",
    "MultiEncoderMultiTaskModel",
    "MultiEncoderPreTrainedModel",
    "MultiEncoderSequenceClassifierOutput",
    "MultiEncoderTokenClassifierOutput",
    "MultiEncoderTokenizer",
    "MultiEncoderTrainer",
    "MultiTaskTrainer",
    "OnnxMultiEncoder",
    "TaskSpec",
    "adapt_members",
    "build_fusion",
    "create_multiencoder_optimizer",
    "distill",
    "export_onnx",
    "freeze_encoders",
    "get_task",
    "load_corpus",
    "load_task",
    "mean_fusion_weights",
    "push_multiencoder_to_hub",
    "quantize_onnx",
    "register_task",
    "save_sentence_transformer",
    "to_sentence_transformer",
    "tokenize_task",
]
