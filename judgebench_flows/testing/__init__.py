"""Test and benchmark helpers: real servers that stand in for remote services on loopback."""
