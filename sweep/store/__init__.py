"""The results database: its tables, versioned upgrades, every write, and reads as frames."""
