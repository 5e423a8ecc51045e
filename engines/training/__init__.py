"""Self-distillation: the target answers a prompt set, and drafters learn from those answers."""
