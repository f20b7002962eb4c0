"""Member pretraining (training side): adapt the members to a domain (`adaptation`, masked LM) or pretrain one with
replaced-token detection (`rtd`, ELECTRA). Each objective registers itself into `objectives.OBJECTIVES` when its
module is imported; importing this package imports both, so every built-in objective is known.

`from hf_multiencoder.pretraining import pretrain, adapt_members, ...` keeps working: the names of both modules are
re-exported here.
"""

from . import adaptation, objectives, rtd
from .adaptation import *  # noqa: F403
from .rtd import *  # noqa: F403

__all__ = [*adaptation.__all__, *rtd.__all__, "objectives"]
