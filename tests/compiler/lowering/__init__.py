"""Tests of compiler/lowering/, mirroring it: test_NAME.py (or test_NAME_ASPECT.py) tests compiler/lowering/NAME.py."""
