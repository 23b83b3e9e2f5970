"""Prompted judges on any vision-language backend."""
