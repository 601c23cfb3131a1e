"""``python -m parastrat`` runs the command-line tool."""

from .cli import main

raise SystemExit(main())
