"""Sub-commands of the ``mmgrpo`` CLI: one module each, exposing ``configure(parser)`` and ``run(args)``."""
