"""nnpsim: the event-driven, cycle-level NNP-1 simulator."""
from .config import Config, load_config
from .errors import SimError
from .simulator import Simulator
from .stats import Stats

__all__ = ["Config", "SimError", "Simulator", "Stats", "load_config"]
