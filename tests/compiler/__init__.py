"""Tests of compiler/, mirroring it: test_NAME.py (or test_NAME_ASPECT.py) tests compiler/NAME.py."""
