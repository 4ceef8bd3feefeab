"""Front stage: one URL for several boxes that serve the same model (nginx upstream on one box, front_of)."""
