"""``python -m services.planner``: run the planner service."""

from services.planner.service import NAME, serve
from shared.lifecycle import run_service

if __name__ == "__main__":
    run_service(NAME, serve)
