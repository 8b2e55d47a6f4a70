"""``python -m services.dvfs``: run the dvfs agent of one node."""

from services.dvfs.service import NAME, serve
from shared.lifecycle import run_service

if __name__ == "__main__":
    run_service(NAME, serve)
