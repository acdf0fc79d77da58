"""The ``jobengine`` command line (typer + rich). The entry point is :func:`jobengine.cli.main.main`."""
