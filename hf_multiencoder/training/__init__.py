"""The training side (not shipped with the weights): the `MultiEncoderTrainer` (`trainer`), run folders and seeds
(`runs`, `results`, `run_steps` for the run scripts), the optimizer factory (`optimization`), metrics, the model card
and its templates, LoRA, distributed helpers, multi-task training, heads on stored member vectors (`frozen`) and
sentence embeddings (`sentence_embeddings`). Import the modules directly; nothing is imported here.
"""
