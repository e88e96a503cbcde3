"""The ``threads`` command: ``threads.cli.main.main`` is the console script; each subcommand is
a ``cmd_<name>`` module registered in ``main.COMMANDS``; what the commands print in common is
``support``, ``render`` and ``hints``. Nothing is imported here: ``threads.demo`` uses
``hints``, and importing it must not load every command."""

__all__: list[str] = []
