"""``python -m app --model DIR`` runs the desktop app."""

import sys

from app.main import main

sys.exit(main())
