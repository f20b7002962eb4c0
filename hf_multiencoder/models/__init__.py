"""The code that ships with the weights: configurations, models, fusion, tokenizer, the embedding mixin, the
multi-task model, the RTD pretraining model and the sentence-transformers module. One flat folder whose files import
only torch, transformers (sentence-transformers for its own module) and each other, relatively: `save_pretrained`
copies them beside the weights for `trust_remote_code=True` loading, and the saved `auto_map` names these files
(`modeling_multiencoder.MultiEncoderForSequenceClassification`), so their names are fixed.
"""
