"""``python -m server``: the ``connector-store`` command."""

from server.cli import main

main()
