"""The agent-building API: agents, their versions, and organizations' deployments."""
