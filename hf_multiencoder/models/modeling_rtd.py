"""Replaced-token detection (ELECTRA, Clark et al. 2020) for any architecture with a masked-LM class: a small
generator (`AutoModelForMaskedLM`) fills the masked positions with plausible tokens; the discriminator (an encoder
with a per-token binary head) learns for every token whether it was replaced.

The recipe as published (google-research/electra):

- the batch comes masked from a masked-LM collator: 15% of the tokens selected, 85% of those replaced by the mask
  token, 15% kept (`labels` hold the original ids at the selected positions, -100 elsewhere);
- the generator's samples at the selected positions are drawn by Gumbel-max, in fp32, from its detached logits
  (no gradient flows from the discriminator into the generator through sampling);
- a sampled token equal to the original is labelled original;
- loss = generator MLM loss + `discriminator_weight` (50) x the discriminator's binary loss over non-padding tokens;
- generator and discriminator share their word embeddings (ALBERT: its factorised embeddings), and the generator's
  output layer is tied to them.

The discriminator is `ElectraForPreTraining` for ELECTRA configs, `AutoModelForTokenClassification` with one label
(`replaced`) for every other architecture; it is what a pretraining run keeps (`discriminator.save_pretrained`), laid
out as google's ELECTRA checkpoints: `AutoModel` loads the encoder, `AutoModelForPreTraining` (ELECTRA) or
`AutoModelForTokenClassification` (others) the encoder with its replaced-token head.

This module imports only `torch` and `transformers`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForMaskedLM, AutoModelForTokenClassification, ElectraForPreTraining
from transformers.modeling_utils import PreTrainedModel
from transformers.utils import ModelOutput

try:  # transformers 5.x
    from transformers import PreTrainedConfig
except ImportError:  # transformers 4.x
    from transformers import PretrainedConfig as PreTrainedConfig

REPLACED_LABEL = "replaced"


def _sub_config(value: PreTrainedConfig | dict | None) -> PreTrainedConfig | None:
    if value is None or isinstance(value, PreTrainedConfig):
        return value
    value = dict(value)
    return AutoConfig.for_model(value.pop("model_type"), **value)


def word_embeddings_size(config: PreTrainedConfig) -> int:
    """Width of an architecture's word embeddings: `embedding_size` where they are factorised (ELECTRA, ALBERT),
    else the hidden size."""
    return getattr(config, "embedding_size", None) or config.hidden_size


class RTDConfig(PreTrainedConfig):
    r"""Configuration of [`RTDForPreTraining`]: a generator and a discriminator config, and the loss's options.

    Args:
        generator (`PreTrainedConfig` or `dict`): The generator's config (an architecture with a masked-LM class).
        discriminator (`PreTrainedConfig` or `dict`): The discriminator's config.
        discriminator_weight (`float`, defaults to 50.0): Weight of the discriminator's loss (the generator's is 1).
        share_embeddings (`bool`, defaults to `True`): Generator and discriminator use one word-embedding matrix.
        sampling_temperature (`float`, defaults to 1.0): Temperature of the generator's Gumbel-max sampling.
    """

    model_type = "rtd"
    has_no_defaults_at_init = True

    def __init__(
        self,
        generator: PreTrainedConfig | dict | None = None,
        discriminator: PreTrainedConfig | dict | None = None,
        discriminator_weight: float = 50.0,
        share_embeddings: bool = True,
        sampling_temperature: float = 1.0,
        **kwargs,
    ):
        generator, discriminator = _sub_config(generator), _sub_config(discriminator)
        if discriminator_weight < 0:
            raise ValueError(f"`discriminator_weight` must be >= 0, got {discriminator_weight}.")
        if sampling_temperature <= 0:
            raise ValueError(f"`sampling_temperature` must be > 0, got {sampling_temperature}.")
        if generator is not None and discriminator is not None:
            if generator.vocab_size != discriminator.vocab_size:
                raise ValueError(f"Generator and discriminator have different vocabularies ({generator.vocab_size} "
                                 f"and {discriminator.vocab_size} tokens): they must read the same token ids (one "
                                 f"tokenizer).")
            if share_embeddings and word_embeddings_size(generator) != word_embeddings_size(discriminator):
                raise ValueError(f"Shared word embeddings need one width: the generator's are "
                                 f"{word_embeddings_size(generator)} wide, the discriminator's "
                                 f"{word_embeddings_size(discriminator)} (set the generator's `embedding_size`, or "
                                 f"share_embeddings=False).")
        self.generator = generator
        self.discriminator = discriminator
        self.discriminator_weight = discriminator_weight
        self.share_embeddings = share_embeddings
        self.sampling_temperature = sampling_temperature
        kwargs.setdefault("tie_word_embeddings", share_embeddings)
        super().__init__(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        output = super().to_dict()
        for key in ("generator", "discriminator"):
            if isinstance(getattr(self, key), PreTrainedConfig):
                output[key] = getattr(self, key).to_dict()
        return output

    @property
    def vocab_size(self) -> int:
        return self.discriminator.vocab_size


@dataclass
class RTDOutput(ModelOutput):
    r"""
    loss (`torch.FloatTensor` of shape `(1,)`):
        Generator MLM loss + `discriminator_weight` x discriminator loss.
    mlm_loss (`torch.FloatTensor` of shape `(1,)`):
        The generator's masked-LM loss over the selected positions.
    discriminator_loss (`torch.FloatTensor` of shape `(1,)`):
        The discriminator's binary cross-entropy over the non-padding tokens.
    logits (`torch.FloatTensor` of shape `(batch_size, sequence_length)`):
        The discriminator's replaced-token scores (before sigmoid).
    replaced (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
        The discriminator's labels: 1 where the token fed to it differs from the original.
    corrupted_input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
        The discriminator's input: the generator's samples at the selected positions, the original tokens elsewhere.
    generator_predictions (`torch.LongTensor` of shape `(n_selected,)`):
        The generator's most likely token at each selected position (row-major order).
    generator_samples (`torch.LongTensor` of shape `(n_selected,)`):
        The sampled token at each selected position.
    """

    loss: torch.FloatTensor | None = None
    mlm_loss: torch.FloatTensor | None = None
    discriminator_loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    replaced: torch.LongTensor | None = None
    corrupted_input_ids: torch.LongTensor | None = None
    generator_predictions: torch.LongTensor | None = None
    generator_samples: torch.LongTensor | None = None


def keep_positions(output, keep: torch.Tensor):
    """A base model's output with only the `keep` positions of its token states, as one `(1, n_kept, hidden)` row:
    a masked-LM head run on it projects the kept positions alone onto the vocabulary."""
    hidden = output[0][keep].unsqueeze(0)  # (1, n_kept, hidden)
    if isinstance(output, tuple):
        return (hidden, *output[1:])
    output["last_hidden_state"] = hidden
    return output


def gumbel_max_sample(logits: torch.Tensor, temperature: float = 1.0, generator: torch.Generator | None = None):
    """One token per row by Gumbel-max, in fp32, from detached logits `(n, vocab)`: argmax(logits / T + Gumbel)."""
    logits = logits.detach().float() / temperature
    uniform = torch.rand(logits.shape, device=logits.device, generator=generator).clamp_(1e-9, 1.0 - 1e-9)
    return (logits - torch.log(-torch.log(uniform))).argmax(dim=-1)


def _path_to(root: nn.Module, target: nn.Module) -> str:
    for name, module in root.named_modules():
        if module is target:
            return name
    raise ValueError(f"{type(target).__name__} is not inside {type(root).__name__}.")


class RTDPreTrainedModel(PreTrainedModel):
    config_class = RTDConfig
    base_model_prefix = "rtd"
    supports_gradient_checkpointing = True
    # the loss is a mean over the batch's tokens: the Trainer scales it for gradient accumulation itself
    accepts_loss_kwargs = False

    def _init_weights(self, module):
        """The generator and the discriminator initialise their own weights; nothing here is new."""


class RTDForPreTraining(RTDPreTrainedModel):
    r"""A generator and a discriminator trained together by replaced-token detection (see the module's docstring).

    `forward` takes a masked-LM batch (`input_ids` masked, `labels` = original ids at the selected positions, -100
    elsewhere) and returns [`RTDOutput`]. Build it from configs (`RTDForPreTraining(config)`) or around live models
    ([`from_generator_discriminator`]); keep the discriminator (`model.discriminator.save_pretrained(...)`).
    """

    def __init__(self, config: RTDConfig, generator: PreTrainedModel | None = None,
                 discriminator: PreTrainedModel | None = None):
        if config.generator is None or config.discriminator is None:
            raise ValueError("RTDConfig needs a generator and a discriminator config.")
        super().__init__(config)
        self.generator = generator if generator is not None else AutoModelForMaskedLM.from_config(config.generator)
        self.discriminator = (discriminator if discriminator is not None
                              else self.discriminator_from_config(config.discriminator))
        if config.share_embeddings:
            self.generator.set_input_embeddings(self.discriminator.get_input_embeddings())
            source = _path_to(self.discriminator, self.discriminator.get_input_embeddings())
            target = _path_to(self.generator, self.generator.get_input_embeddings())
            self._tied_weights_keys = {f"generator.{target}.weight": f"discriminator.{source}.weight"}
        self.generator.tie_weights()
        self.post_init()

    @staticmethod
    def discriminator_from_config(config: PreTrainedConfig) -> PreTrainedModel:
        """`ElectraForPreTraining` for ELECTRA, else the architecture's token classifier with one label."""
        if config.model_type == "electra":
            return ElectraForPreTraining(config)
        config.num_labels = 1
        config.id2label, config.label2id = {0: REPLACED_LABEL}, {REPLACED_LABEL: 0}
        return AutoModelForTokenClassification.from_config(config)

    @classmethod
    def from_generator_discriminator(cls, generator: PreTrainedModel, discriminator: PreTrainedModel,
                                     **kwargs) -> RTDForPreTraining:
        """Wrap live models (e.g. a pretrained member as the discriminator, a fresh generator); `kwargs` go to
        `RTDConfig`. The discriminator's word embeddings are kept and the generator's replaced by them."""
        config = RTDConfig(generator=generator.config, discriminator=discriminator.config, **kwargs)
        return cls(config, generator=generator, discriminator=discriminator)

    def get_input_embeddings(self) -> nn.Module:
        return self.discriminator.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module):
        self.discriminator.set_input_embeddings(value)
        if self.config.share_embeddings:
            self.generator.set_input_embeddings(value)
            self.generator.tie_weights()

    def forward(
        self,
        input_ids: torch.LongTensor,
        labels: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> RTDOutput:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`): The masked input.
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`): The original token at the selected
            positions, -100 elsewhere.
        """
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        extra = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        selected = labels != -100  # (batch, seq)
        original = torch.where(selected, labels, input_ids)  # (batch, seq)

        # generator: its masked-LM head runs on the selected positions only
        base = self.generator.base_model
        handle = base.register_forward_hook(lambda module, args, output: keep_positions(output, selected))
        try:
            gen_logits = self.generator(input_ids=input_ids, attention_mask=attention_mask, **extra).logits
        finally:
            handle.remove()
        gen_logits = gen_logits.reshape(-1, gen_logits.size(-1))  # (n_selected, vocab)
        targets = labels[selected]  # (n_selected,)
        mlm_loss = nn.functional.cross_entropy(gen_logits.float(), targets) if targets.numel() else (
            gen_logits.sum() * 0.0)

        # sampling: Gumbel-max from detached logits; the discriminator's loss cannot reach the generator through it
        samples = gumbel_max_sample(gen_logits, self.config.sampling_temperature)  # (n_selected,)
        corrupted = original.clone()  # (batch, seq)
        corrupted[selected] = samples
        replaced = (corrupted != original).long()  # (batch, seq); a sample equal to the original is original

        disc_logits = self.discriminator(input_ids=corrupted, attention_mask=attention_mask, **extra).logits
        disc_logits = disc_logits.reshape(corrupted.shape)  # (batch, seq)
        active = attention_mask.bool()
        disc_loss = nn.functional.binary_cross_entropy_with_logits(disc_logits[active].float(),
                                                                   replaced[active].float())
        loss = mlm_loss + self.config.discriminator_weight * disc_loss
        return RTDOutput(loss=loss, mlm_loss=mlm_loss, discriminator_loss=disc_loss,
                         logits=disc_logits, replaced=replaced, corrupted_input_ids=corrupted,
                         generator_predictions=gen_logits.detach().argmax(dim=-1), generator_samples=samples)


__all__ = [
    "REPLACED_LABEL",
    "RTDConfig",
    "RTDForPreTraining",
    "RTDOutput",
    "RTDPreTrainedModel",
    "gumbel_max_sample",
    "keep_positions",
    "word_embeddings_size",
]
