"""Neuralis for Jupyter: LLM agents that live inside Jupyter."""

__version__ = "0.1.0"
