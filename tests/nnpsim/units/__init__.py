"""Tests of nnpsim/units/, mirroring it: test_NAME.py (or test_NAME_ASPECT.py) tests nnpsim/units/NAME.py."""
