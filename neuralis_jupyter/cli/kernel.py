"""``neuralis kernel install``: install the "Neuralis Agent" kernelspec for this Python.

``pip install`` already installs it into the environment's ``share/jupyter/kernels``; this command is
for a Jupyter that runs from another environment (``--user``) or another prefix.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

__all__ = ["install_kernelspec", "register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("kernel", help="manage the Neuralis Agent kernelspec")
    ksub = p.add_subparsers(dest="kernel_command", metavar="ACTION")
    inst = ksub.add_parser("install", help="install the kernelspec so Jupyter offers 'Neuralis Agent'")
    where = inst.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="into your user Jupyter data directory")
    where.add_argument("--sys-prefix", action="store_true", help="into this environment (sys.prefix)")
    where.add_argument("--prefix", help="into PREFIX/share/jupyter/kernels")
    inst.add_argument("--name", default="neuralis", help="kernelspec name (default: neuralis)")
    inst.set_defaults(func=run)
    p.set_defaults(func=lambda _args: (p.print_help(), 2)[1])


def _source() -> Path:
    from .._resources import _HERE

    for candidate in (_HERE.parent / "kernelspec",):
        if (candidate / "kernel.json").is_file():
            return candidate
    import jupyter_client.kernelspec as ks

    spec = ks.KernelSpecManager().get_kernel_spec("neuralis")
    return Path(spec.resource_dir)


def install_kernelspec(*, name: str = "neuralis", user: bool = False, prefix: str | None = None) -> str:
    """Install the kernelspec with this interpreter in its argv; return where it went."""
    from jupyter_client.kernelspec import KernelSpecManager

    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / name
        shutil.copytree(_source(), target)
        spec = json.loads((target / "kernel.json").read_text())
        spec["argv"][0] = sys.executable  # the Python that has neuralis_jupyter installed
        (target / "kernel.json").write_text(json.dumps(spec, indent=2) + "\n")
        return KernelSpecManager().install_kernel_spec(
            str(target), name, user=user, prefix=prefix, replace=True
        )


def run(args: argparse.Namespace) -> int:
    prefix = sys.prefix if args.sys_prefix else args.prefix
    where = install_kernelspec(name=args.name, user=args.user, prefix=prefix)
    print(f"installed the 'Neuralis Agent' kernelspec {args.name!r} in {where}")
    return 0
