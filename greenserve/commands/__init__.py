"""CLI sub-commands: each module defines NAME, HELP, add_arguments(parser) and run(args) -> int."""
