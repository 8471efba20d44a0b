"""Memoised calls inside torch.distributed jobs: one hit-or-miss decision for all ranks."""
