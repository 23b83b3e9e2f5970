"""Datasets of edits: manifest reading and validation."""

from editlens.data.manifest import ManifestReport, read_manifest, write_manifest

__all__ = ["ManifestReport", "read_manifest", "write_manifest"]
