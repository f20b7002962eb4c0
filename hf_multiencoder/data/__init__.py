"""Data: the task registry (`tasks`), readers and loading your own files (`loading`), the collator
(`data_collator`), the feature cache of frozen members (`feature_cache`) and pretraining corpora (`corpus`).

The names of `loading` (`load_task`, `tokenize_task`, `local_path`, ...) are importable from here too, as before the
package had sub-folders; they are imported on first use, so that the collator and the registry stay light.
"""

import importlib


def __getattr__(name: str):
    loading = importlib.import_module(".loading", __name__)
    if name.startswith("__") or not hasattr(loading, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(loading, name)
