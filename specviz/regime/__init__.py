"""The regime map: which method wins on which hardware (docs/regime.md)."""
