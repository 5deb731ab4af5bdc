"""The demos `make demo` runs: the hand-written examples, a small CNN layer by layer, a whole network
(demo.py), and one dynamic binary run at three resolutions (dynamic_demo.py)."""
