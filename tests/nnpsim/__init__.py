"""Tests of nnpsim/, mirroring it: test_NAME.py (or test_NAME_ASPECT.py) tests nnpsim/NAME.py."""
