"""The search space and shipped default configurations, installed as package data."""
