"""Data sources, partitioners and client shards."""
