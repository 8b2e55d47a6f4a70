"""The options of each benchmark, one light module per ``greenserve bench`` command.

Each module defines ``NAME``, ``HELP`` and ``add_arguments(parser)`` for the benchmark whose
work is in the module of the same name one level up (:mod:`greenserve.bench`). They import
nothing heavy (no numpy, pandas, scikit-learn, NATS or Redis): the CLI imports all of them to
build its parser, and ``greenserve --help`` should answer at once.
"""
