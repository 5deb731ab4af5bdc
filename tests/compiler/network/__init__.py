"""Tests of compiler/network/, mirroring it: test_NAME.py (or test_NAME_ASPECT.py) tests compiler/network/NAME.py."""
