"""The Neuralis kernel: an IPython kernel where a cell is a message to an agent.

Importing this package imports nothing heavy: the kernel must start about as fast as plain ipykernel.
The runtime, the providers and the store load on the first chat cell. A notebook names its own chat
target with ``from neuralis_jupyter.kernel.current import current``.
"""

__all__ = ["KERNEL_NAME"]

#: The kernelspec name (``jupyter kernelspec list``).
KERNEL_NAME = "neuralis"
