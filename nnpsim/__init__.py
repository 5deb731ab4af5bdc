"""nnpsim: the event-driven, cycle-level NNP-1 simulator."""
from .jitcache import use_versioned_cache

use_versioned_cache()  # before any submodule defines a cached jitted function

from .semantics import check_isa  # noqa: E402

check_isa()  # refuse to start when the semantics table and isa_spec/nnp1.toml disagree

from .config import Config, load_config  # noqa: E402
from .errors import SimError  # noqa: E402
from .simulator import Simulator  # noqa: E402
from .stats import Stats  # noqa: E402

__all__ = ["Config", "SimError", "Simulator", "Stats", "load_config"]
