"""``python -m neuralis_jupyter.kernel -f CONNECTION_FILE``: what the kernelspec runs."""

from ipykernel.kernelapp import IPKernelApp

from .kernel import NeuralisKernel

if __name__ == "__main__":
    IPKernelApp.launch_instance(kernel_class=NeuralisKernel)
