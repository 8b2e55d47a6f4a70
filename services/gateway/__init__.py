"""The HTTP ingress: an OpenAI-compatible API in front of the JetStream ingress subject."""
