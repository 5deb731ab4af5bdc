"""The fuzzing budget switch: small by default (inside `make test`), long with FUZZ=long.

The profile "nnp-fuzz" is registered here and never loaded globally, so the
rest of the suite keeps its own hypothesis settings.  Each fuzz test asks
`tests.fuzz.strategies.budget(n)` for its settings: n examples under the
default profile, n * FUZZ_FACTOR (default 100) under FUZZ=long, which makes
the whole fuzz suite run for 20-25 minutes on a 2-core machine.  `max_examples` of the
profile is 100 times that factor; `budget` scales each test's own n by it.
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

LONG = os.environ.get("FUZZ", "").lower() == "long"
FACTOR = int(os.environ.get("FUZZ_FACTOR", "100")) if LONG else 1

settings.register_profile(
    "nnp-fuzz", max_examples=100 * FACTOR, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture])
