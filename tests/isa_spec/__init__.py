"""Tests of isa_spec/, mirroring it: test_NAME.py (or test_NAME_ASPECT.py) tests isa_spec/NAME.py."""
