"""One readable file per algorithm."""
