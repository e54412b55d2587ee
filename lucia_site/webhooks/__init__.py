"""Provider webhooks (the edge floor: they call connectors and the runtime; no domain module imports them)."""
