"""hf_multiencoder: tune several pretrained Hugging Face encoders together as one model.

Importing the package registers the config, models and tokenizer with the Auto classes, and marks them so that
``save_pretrained``/``push_to_hub`` ship the code files and write ``auto_map`` (``trust_remote_code=True`` loading
where this package is not installed).
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)

from .configuration_multiencoder import MultiEncoderConfig
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
)
from .tokenization_multiencoder import MultiEncoderBatch, MultiEncoderTokenizer

__version__ = "0.1.0"

AutoConfig.register(MultiEncoderConfig.model_type, MultiEncoderConfig, exist_ok=True)
AutoModel.register(MultiEncoderConfig, MultiEncoderModel, exist_ok=True)
AutoModelForSequenceClassification.register(MultiEncoderConfig, MultiEncoderForSequenceClassification, exist_ok=True)
AutoModelForTokenClassification.register(MultiEncoderConfig, MultiEncoderForTokenClassification, exist_ok=True)
AutoTokenizer.register(MultiEncoderConfig, tokenizer_class=MultiEncoderTokenizer, exist_ok=True)

MultiEncoderConfig.register_for_auto_class()
MultiEncoderModel.register_for_auto_class("AutoModel")
MultiEncoderForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
MultiEncoderForTokenClassification.register_for_auto_class("AutoModelForTokenClassification")
MultiEncoderTokenizer.register_for_auto_class("AutoTokenizer")

__all__ = [
    "FUSION_MAPPING",
    "Fusion",
    "MultiEncoderBatch",
    "MultiEncoderConfig",
    "MultiEncoderDataCollator",
    "MultiEncoderForSequenceClassification",
    "MultiEncoderForTokenClassification",
    "MultiEncoderModel",
    "MultiEncoderModelOutput",
    "MultiEncoderPreTrainedModel",
    "MultiEncoderSequenceClassifierOutput",
    "MultiEncoderTokenClassifierOutput",
    "MultiEncoderTokenizer",
    "build_fusion",
]
