"""A small project whose code digests the tests check."""
