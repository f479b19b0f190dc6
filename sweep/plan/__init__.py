"""Planning: the fastest schedule that fits a card, from shallow predictions, and measuring it (--verify)."""

# --verify's defaults (NOTE [ Verdicts above the noise ] in verify.py): measured runs of every schedule
# and timed steps per run. Here, not in verify.py, so `plan --help` does not import torch to show them.
VERIFY_ROUNDS = 3
VERIFY_STEPS = 10
