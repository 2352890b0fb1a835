"""Neuralis for Jupyter: LLM agents that live inside Jupyter."""

__version__ = "0.1.0"


def load_ipython_extension(shell):
    """``%load_ext neuralis_jupyter``: ``%%chat`` and the Neuralis line magics in any IPython kernel."""
    from .kernel.magics import load_ipython_extension as load

    load(shell)
