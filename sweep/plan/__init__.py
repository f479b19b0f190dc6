"""Planning: the fastest schedule that fits a card, from shallow predictions, and measuring it (--verify)."""
