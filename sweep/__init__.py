"""The sweep harness: Hydra config -> cells -> isolated worker -> results database -> reports."""
