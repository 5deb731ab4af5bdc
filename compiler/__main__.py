"""`python -m compiler` is nnpc."""
import sys

from .cli import main

sys.exit(main())
