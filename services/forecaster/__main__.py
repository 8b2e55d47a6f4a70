"""``python -m services.forecaster``: run the forecaster service."""

from services.forecaster.service import NAME, serve
from shared.lifecycle import run_service

if __name__ == "__main__":
    run_service(NAME, serve)
