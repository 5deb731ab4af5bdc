"""Tests of compiler/passes/, mirroring it: test_NAME.py (or test_NAME_ASPECT.py) tests compiler/passes/NAME.py."""
