"""Voice-agent framework integrations over the gateway's sessions (optional extras)."""
