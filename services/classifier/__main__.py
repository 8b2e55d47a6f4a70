"""``python -m services.classifier``: run the classifier service."""

from services.classifier.service import NAME, serve
from shared.lifecycle import run_service

if __name__ == "__main__":
    run_service(NAME, serve)
