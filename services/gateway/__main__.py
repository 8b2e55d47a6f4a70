"""``python -m services.gateway``: run the OpenAI-compatible HTTP ingress."""

from services.gateway.service import NAME, serve
from shared.lifecycle import run_service

if __name__ == "__main__":
    run_service(NAME, serve)
