"""Provider errors.

ProviderError
├── MissingCredentials   no key for the provider (names the variable to set)
├── UnknownModel         a model reference the catalog does not know
├── ModelCallFailed      the provider answered with an error or the connection failed
├── ModelRequestBlocked  a model request to a non-loopback host while the test guard is on
└── CassetteMismatch     a replayed request differs from the recorded one
"""

from __future__ import annotations

__all__ = [
    "CassetteMismatch",
    "InsecureCredentials",
    "MissingCredentials",
    "ModelCallFailed",
    "ModelRequestBlocked",
    "NoModelConfigured",
    "ProviderError",
    "UnknownModel",
]


class ProviderError(Exception):
    code = "provider_error"


class MissingCredentials(ProviderError):
    code = "missing_credentials"

    def __init__(self, provider: str, variables: tuple[str, ...]) -> None:
        self.provider = provider
        self.variables = variables
        super().__init__(
            f"no {provider} API key: set {' or '.join(variables)} in the environment, "
            f"or store one in the project's credentials (neuralis credentials set {variables[0]})"
        )

    def __reduce__(self) -> tuple[type, tuple[str, tuple[str, ...]]]:
        return (type(self), (self.provider, self.variables))


class UnknownModel(ProviderError, ValueError):
    code = "unknown_model"

    def __init__(self, ref: str, hint: str) -> None:
        self.ref = ref
        self.hint = hint
        super().__init__(f"unknown model {ref!r}: {hint}")

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.ref, self.hint))


class ModelCallFailed(ProviderError):
    code = "model_call_failed"

    def __init__(self, provider: str, message: str, *, status: int | None = None) -> None:
        self.provider = provider
        self.status = status
        super().__init__(f"{provider} request failed{f' ({status})' if status else ''}: {message}")

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.provider, str(self)))


class ModelRequestBlocked(ProviderError):
    code = "model_request_blocked"

    def __init__(self, url: str) -> None:
        self.url = url
        super().__init__(
            f"refused a model request to {url}: real model requests are disabled here "
            "(NEURALIS_MODEL_REQUESTS=loopback); point the provider at the loopback fake server"
        )

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (type(self), (self.url,))


class CassetteMismatch(ProviderError):
    code = "cassette_mismatch"

    def __init__(self, step: int, diff: str, *, path: str | None = None) -> None:
        self.step = step
        self.diff = diff
        self.path = path
        where = f" of {path}" if path else ""
        super().__init__(
            f"the request at step {step}{where} differs from the recorded one; re-record with --record "
            f"if the change is intended:\n{diff}"
        )

    def __reduce__(self) -> tuple[type, tuple[int, str]]:
        return (type(self), (self.step, self.diff))


class InsecureCredentials(ProviderError):
    """The project's credential file can be read by other accounts."""

    code = "insecure_credentials"

    def __init__(self, path: str, mode: int) -> None:
        self.path = path
        self.mode = mode
        super().__init__(
            f"refusing to read {path}: it is readable by other accounts (mode {mode:03o}); "
            f"run `chmod 600 {path}` and try again"
        )

    def __reduce__(self) -> tuple[type, tuple[str, int]]:
        return (type(self), (self.path, self.mode))


class NoModelConfigured(ProviderError):
    code = "no_model"

    def __init__(self, variables: tuple[str, ...]) -> None:
        self.variables = variables
        super().__init__(
            f"no model provider has credentials: set {' or '.join(variables)} "
            "(or name a model, e.g. --model openai:llama3.2 with OPENAI_BASE_URL pointing at a local server)"
        )

    def __reduce__(self) -> tuple[type, tuple[tuple[str, ...]]]:
        return (type(self), (self.variables,))
