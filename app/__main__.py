"""``python -m app --model DIR`` runs the desktop app."""

import sys

from app.launch import main

sys.exit(main())
