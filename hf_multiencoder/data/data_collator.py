"""Data collator for multi-encoder batches (training side; not shipped with the weights)."""

from __future__ import annotations

from dataclasses import dataclass

from ..models.tokenization_multiencoder import MultiEncoderTokenizer


@dataclass
class MultiEncoderDataCollator:
    """Pads each member's inputs to that member's own longest sequence in the batch.

    Takes examples as ``MultiEncoderTokenizer`` (without ``return_tensors``) and ``datasets.map`` store them:
    per-member lists under ``input_ids``/``attention_mask``/``token_type_ids``/``word_ids``, plus ``word_mask`` and
    ``label``/``labels``. Returns member-major tensors the model takes. Word labels are padded with -100.
    """

    tokenizer: MultiEncoderTokenizer
    pad_to_multiple_of: int | None = None
    padding: bool | str = True
    max_length: int | list[int] | None = None
    return_tensors: str = "pt"
    # Columns a Trainer may keep for itself that are no model input: `length` feeds the length-grouped sampler.
    ignore_keys: tuple[str, ...] = ("length",)

    def __call__(self, features: list[dict]) -> dict:
        if self.ignore_keys and features and any(k in features[0] for k in self.ignore_keys):
            features = [{k: v for k, v in f.items() if k not in self.ignore_keys} for f in features]
        batch = self.tokenizer.pad(features, padding=self.padding, max_length=self.max_length,
                                   pad_to_multiple_of=self.pad_to_multiple_of, return_tensors=self.return_tensors)
        return dict(batch)
