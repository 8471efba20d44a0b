"""The reliability suite: crashes, concurrency, corruption, bad input (docs/reliability.md)."""
