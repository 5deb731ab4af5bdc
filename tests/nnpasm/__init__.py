"""Tests of nnpasm/, mirroring it: test_NAME.py (or test_NAME_ASPECT.py) tests nnpasm/NAME.py."""
