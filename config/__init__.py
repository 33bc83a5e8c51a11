"""Configuration (defaults.yaml merged with the user's file) and the model catalog."""
