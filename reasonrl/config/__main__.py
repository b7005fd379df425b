"""``python -m reasonrl.config [field=value ...]``: see :func:`reasonrl.config.cli.main`."""

from reasonrl.config.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
