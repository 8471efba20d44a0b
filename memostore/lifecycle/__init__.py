"""The store's lifecycle: what it holds (du), when each evaluation was last used,
names that pin evaluations (tags), removing evaluations, and size-bounded eviction."""
