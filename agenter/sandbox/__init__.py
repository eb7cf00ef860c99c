"""Sandbox helpers shared by backends: path confinement and workspace change detection."""
