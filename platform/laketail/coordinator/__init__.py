"""Coordinators: consumer groups (members, generations, assignment, committed offsets)
and transactions. They reach the log only through the ports of :mod:`.ports`;
:mod:`.fakes` implements those in memory for unit tests."""
