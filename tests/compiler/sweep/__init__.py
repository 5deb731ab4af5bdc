"""Tests of compiler/sweep/, mirroring it: test_NAME.py (or test_NAME_ASPECT.py) tests compiler/sweep/NAME.py."""
