"""Fakes at the vendor boundary: local servers speaking each provider's protocol to the real client library."""
