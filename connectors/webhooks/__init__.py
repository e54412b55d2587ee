"""Provider webhooks (an edge floor: they call connectors and the runtime; nothing imports them)."""
