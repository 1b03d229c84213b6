"""``agenttx keys new``: make an API key for ``agenttx serve --api-keys FILE``.

The secret is printed once, on stdout, and never stored: the file gets only its hash. Give the
secret to the caller (its client sends it as ``authorization: Bearer <key>``); add the printed
``[[key]]`` table to the key file and send the server SIGHUP. To revoke a key, delete its
table and send SIGHUP again.
"""

from __future__ import annotations

import click

from agenttx.types import Role


@click.group()
def keys() -> None:
    """API keys for `agenttx serve --api-keys FILE`."""


@keys.command("new")
@click.option("--principal", required=True, help="Who the key stands for (a user or an agent).")
@click.option("--tenant", default="default", show_default=True, help="The key's tenant.")
@click.option(
    "--role",
    "roles",
    multiple=True,
    type=click.Choice([r.value for r in Role]),
    default=(Role.AGENT.value,),
    show_default=True,
    help="A role of the key (repeat for several).",
)
@click.option(
    "--append-to",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Also append the [[key]] table to this key file.",
)
def new(principal: str, tenant: str, roles: tuple[str, ...], append_to: str | None) -> None:
    """Print a new secret (once) and the [[key]] table to add to the key file."""
    from agenttx.auth.keys import key_entry_toml, new_secret
    from agenttx.errors import InvalidArgument

    secret = new_secret()
    try:
        entry = key_entry_toml(secret, principal, tenant, roles)
    except InvalidArgument as exc:
        raise click.UsageError(exc.message) from None
    if append_to is not None:
        with open(append_to, "a", encoding="utf-8") as f:
            f.write("\n" + entry)
    click.echo(f"secret (shown once; give it to {principal}, store it nowhere else):")
    click.echo(f"  {secret}")
    click.echo("")
    if append_to is not None:
        click.echo(f"appended to {append_to} (send the server SIGHUP to load it):")
    else:
        click.echo("add to the --api-keys file, then send the server SIGHUP:")
    click.echo(entry, nl=False)
