"""lagwatch's own state topic: judgement that survives a restart (docs/design.md#state)."""
