"""Code every GreenServe service uses: settings, codec, NATS/Redis helpers, telemetry,
lifecycle, the GPU engine model and metric definitions."""
