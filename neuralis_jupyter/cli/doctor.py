"""``neuralis doctor``: where the data lives, which schema it has, which providers can be reached."""

from __future__ import annotations

import argparse

from sqlalchemy.engine import make_url

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="check the installation and print where data is kept")
    p.add_argument("--settings", action="store_true", help="also list every setting with its help text")
    p.set_defaults(func=run)


def _safe_url(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def run(args: argparse.Namespace) -> int:
    from ..config import load_settings
    from ..store import Store
    from ..store.migrations import migrate, pending_migrations, schema_version
    from ..store.sql import open_engine

    settings = load_settings()
    store = Store(settings)
    print(f"data root:      {settings.data_root}")
    print(f"store:          {_safe_url(settings.store_url)}")
    # The schema as found, before anything migrates it (opening the Store's engine would).
    engine = open_engine(settings.store_url)
    pending = pending_migrations(engine)
    print(f"schema version: {schema_version(engine)} ({len(pending)} pending)")
    if pending:
        print(f"migrated:       {', '.join(migrate(engine))}")
    from ..providers.credentials import PROVIDER_KEYS, has_credentials
    from ..providers.errors import ProviderError
    from ..store.projects import DEFAULT_PROJECT_ID

    for provider, keys in PROVIDER_KEYS.items():
        try:
            found = has_credentials(
                provider,
                data_root=store.data_root,
                project_id=DEFAULT_PROJECT_ID,
                # A keyless local server named only in the Jupyter config is reachable too.
                base_url=getattr(settings, f"{provider}_base_url") or None,
            )
        except ProviderError as exc:  # e.g. a credential file others can read: say how to fix it
            state = f"credentials unusable: {exc}"
        else:
            names = " or ".join(keys.api_key_vars)
            state = f"credentials found ({found})" if found else f"no key (set {names})"
        print(f"provider {provider + ':':11s}{state}")
    if args.settings:
        print()
        for name, trait in sorted(settings.traits(config=True).items()):
            print(f"c.NeuralisSettings.{name} = {getattr(settings, name)!r}")
            print(f"    {trait.help}")
    return 0
