"""Tests of compiler/dynamic/, mirroring it: test_NAME.py (or test_NAME_ASPECT.py) tests compiler/dynamic/NAME.py."""
