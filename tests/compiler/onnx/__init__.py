"""Tests of compiler/onnx/, mirroring it: test_NAME.py (or test_NAME_ASPECT.py) tests compiler/onnx/NAME.py."""
