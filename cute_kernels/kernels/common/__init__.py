"""Pieces every kernel family shares: hardware constants, inline PTX the DSL does not expose,
the persistent tile order, and the Ampere-path copy and swizzle helpers."""
