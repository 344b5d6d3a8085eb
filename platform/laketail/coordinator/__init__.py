"""Coordinators: consumer groups (members, generations, assignment, committed offsets)."""
