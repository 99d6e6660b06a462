"""`quafka configs --entity-type users|clients`: client quotas, as kafka-configs.sh manages them
(Kafka's `ConfigCommand`: `alterConfig` for users and clients, `alterQuotaConfigs`,
`describeClientQuotaAndUserScramCredentialConfigs`, `describeQuotaConfigs`).

    quafka configs --bootstrap-server HOST:PORT --entity-type users --entity-name alice --alter \\
        --add-config 'producer_byte_rate=1048576,consumer_byte_rate=2097152,request_percentage=50'
    quafka configs --bootstrap-server HOST:PORT --entity-type users --entity-name alice \\
        --entity-type clients --entity-name app --describe
    quafka configs --bootstrap-server HOST:PORT --entity-type clients --entity-default --alter \\
        --delete-config producer_byte_rate

An entity is a user, a client id, or a user with a client id (`--entity-type` given twice, each
followed by its `--entity-name` or `--entity-default`, paired in the order given, as ConfigCommand
pairs them). The shorthands `--user NAME`, `--user-defaults`, `--client ID`, `--client-defaults`
work as Kafka's.

The config names say which API a change goes to, as in ConfigCommand: the four quota keys
(`producer_byte_rate`, `consumer_byte_rate`, `request_percentage`, `controller_mutation_rate`) to
AlterClientQuotas; `SCRAM-SHA-256` / `SCRAM-SHA-512` for a named user to
AlterUserScramCredentials (cli/_scram_credentials.py, passed in as `scram`). Kafka refuses a
single `--alter` that changes both kinds for a user ("Cannot alter both quota and SCRAM credential
configs simultaneously ..."), and so does quafka; a client entity takes quota keys only.

Output as ConfigCommand prints it: ``Completed updating config for user alice.`` (``... default
config for users in the cluster.``), and for `--describe` one line per entity:
``Quota configs for user-principal 'alice', client-id 'app' are producer_byte_rate=1048576.0`` —
values as Java prints a double (`Double.toString`: ``50.0``, ``1.048576E7``). Departure: Kafka
prints the entities and their keys in hash-map order; quafka sorts them (the default entity first,
keys by name).
"""

from __future__ import annotations

import argparse
import math
from decimal import Decimal
from typing import Any

from quafka.broker.core.client_quotas import CLIENT_ID, QUOTA_KEYS, USER

from ._common import ToolError, open_admin

USERS, CLIENTS = "users", "clients"
#: Kafka's ScramMechanism names: for users, these keys are SCRAM credentials, not quotas
SCRAM_KEYS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_QUOTA_ENTITY = {USERS: USER, CLIENTS: CLIENT_ID}
_LABEL = {USER: "user-principal", CLIENT_ID: "client-id"}


# ----------------------------------------------------------------------------- options

class _EntityName(argparse.Action):
    """--entity-name NAME and --entity-default append to one list in command-line order ("" is the
    default entity), so that each pairs with the --entity-type in the same position."""

    def __call__(self, parser, namespace, values, option_string=None):
        names = list(getattr(namespace, "entity_names", None) or [])
        if self.dest == "entity_default":
            names.append("")
            setattr(namespace, "entity_default", True)
        else:
            names.append(values)
            setattr(namespace, "entity_name", values)
        setattr(namespace, "entity_names", names)


ENTITY_NAME_ACTION = _EntityName


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """kafka-configs' user and client shorthands."""
    parser.add_argument("--user", metavar="NAME", help="shorthand for --entity-type users --entity-name NAME")
    parser.add_argument("--user-defaults", action="store_true",
                        help="shorthand for --entity-type users --entity-default")
    parser.add_argument("--client", metavar="ID", help="shorthand for --entity-type clients --entity-name ID")
    parser.add_argument("--client-defaults", action="store_true",
                        help="shorthand for --entity-type clients --entity-default")


def handles(args: argparse.Namespace) -> bool:
    """Whether the command is about users or clients (this module's), or another entity type."""
    types = args.entity_type or []
    return (USERS in types or CLIENTS in types or args.user is not None or args.client is not None
            or args.user_defaults or args.client_defaults)


def _entities(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """[(entity type, name; "" for the default; None when not given)] as ConfigCommandOptions
    builds entityTypes / entityNames, checked as its checkArgs and processCommand check them."""
    flags = [(USERS, args.user), (CLIENTS, args.client)]
    defaults = [(USERS, args.user_defaults), (CLIENTS, args.client_defaults)]
    explicit = args.entity_type or []
    names = list(getattr(args, "entity_names", None) or [])
    if (explicit or names) and (any(v is not None for _, v in flags) or any(on for _, on in defaults)
                                or any(getattr(args, f, None) is not None for f in ("topic", "broker", "group"))
                                or getattr(args, "broker_defaults", False)):
        raise ToolError("--entity-{type,name,default} should not be used in conjunction with specific entity flags")
    if not explicit and any(getattr(args, f, None) is not None for f in ("topic", "broker", "group")):
        raise ToolError("Only 'users' and 'clients' entity types may be specified together")
    types = (list(explicit) + [t for t, v in flags if v is not None] + [t for t, on in defaults if on])
    names += [v for _, v in flags if v is not None] + ["" for _, on in defaults if on]
    duplicates = sorted({t for t in types if types.count(t) > 1})
    if duplicates:
        raise ToolError(f"Duplicate entity type(s) specified: {','.join(duplicates)}")
    if len(types) > 1 and set(types) != {USERS, CLIENTS}:
        raise ToolError(f"Only '{USERS}' and '{CLIENTS}' entity types may be specified together")
    if len(names) > len(types):
        raise ToolError("More entity names specified than entity types")
    if args.alter:
        if not names:
            raise ToolError("An entity-name or default entity must be specified with --alter of users, clients, "
                            "brokers or ips")
        if len(names) != len(types):
            raise ToolError("An entity name must be specified for every entity type")
    return [(t, names[i] if i < len(names) else None) for i, t in enumerate(types)]


# ----------------------------------------------------------------------------- the command

def run(args: argparse.Namespace, to_set: dict[str, str], to_delete: list[str], scram: Any = None) -> int:
    """Describe or alter the quotas (and, through `scram`, a user's SCRAM credentials) of a user,
    a client id or a user's client id. `scram` is cli/_scram_credentials (alter(args, user,
    to_set, to_delete), describe(args, user or None)), or None where it is not served."""
    entities = _entities(args)
    if args.describe:  # --all changes nothing here, as in Kafka (quotas have no static or default values)
        return _describe(args, entities, scram)
    if args.all:
        raise ToolError("--all can only be used with --describe")
    return _alter(args, entities, to_set, to_delete, scram)


def _alter(args, entities, to_set: dict[str, str], to_delete: list[str], scram: Any) -> int:
    """ConfigCommand.alterConfig for users and clients: which keys may go where, then one API."""
    types = [t for t, _ in entities]
    head_type, head_name = entities[0]
    is_scram = [k for k in to_set if k in SCRAM_KEYS], [k for k in to_delete if k in SCRAM_KEYS]
    unknown_add = sorted(k for k in to_set if k not in SCRAM_KEYS and k not in QUOTA_KEYS)
    unknown_delete = sorted(k for k in to_delete if k not in SCRAM_KEYS and k not in QUOTA_KEYS)
    has_quota = any(k in QUOTA_KEYS for k in [*to_set, *to_delete])
    if head_type == CLIENTS or len(types) == 2:
        if unknown_add or is_scram[0]:
            raise ToolError(f"Only quota configs can be added for '{CLIENTS}' using --bootstrap-server. "
                            f"Unexpected config names: {','.join(sorted({*unknown_add, *is_scram[0]}))}")
        if unknown_delete or is_scram[1]:
            raise ToolError(f"Only quota configs can be deleted for '{CLIENTS}' using --bootstrap-server. "
                            f"Unexpected config names: {','.join(sorted({*unknown_delete, *is_scram[1]}))}")
    else:
        if unknown_add:
            raise ToolError(f"Only quota and SCRAM credential configs can be added for '{USERS}' using "
                            f"--bootstrap-server. Unexpected config names: {','.join(unknown_add)}")
        if unknown_delete:
            raise ToolError(f"Only quota and SCRAM credential configs can be deleted for '{USERS}' using "
                            f"--bootstrap-server. Unexpected config names: {','.join(unknown_delete)}")
        if is_scram[0] or is_scram[1]:
            if head_name == "":
                raise ToolError("The use of --entity-default or --user-defaults is not allowed with User SCRAM "
                                "Credentials using --bootstrap-server.")
            if has_quota:
                raise ToolError(f"Cannot alter both quota and SCRAM credential configs simultaneously for "
                                f"'{USERS}' using --bootstrap-server.")
    if has_quota:
        _alter_quotas(args, entities, to_set, to_delete)
    else:  # SCRAM credentials of one named user
        if scram is None:
            raise ToolError("SCRAM credentials are not served by this quafka (no SASL/SCRAM support)")
        code = scram.alter(args, head_name, to_set, to_delete)
        if code:
            return code
        return 0  # the SCRAM module printed its "Completed updating config for user ..." line
    if head_name:
        print(f"Completed updating config for {head_type[:-1]} {head_name}.")
    else:
        print(f"Completed updating default config for {head_type} in the cluster.")
    return 0


def _wire_entity(entities) -> tuple[tuple[str, str | None], ...]:
    return tuple((_QUOTA_ENTITY[t], name or None) for t, name in entities)


def _components(entities) -> list[tuple[str, Any]]:
    """Describe filter components (ConfigCommand.getAllClientQuotasConfigs): a name matches exactly,
    the default entity by DEFAULT, no name any entity of the type."""
    return [(_QUOTA_ENTITY[t], ... if name is None else (name or None)) for t, name in entities]


def _alter_quotas(args, entities, to_set: dict[str, str], to_delete: list[str]) -> None:
    """ConfigCommand.alterQuotaConfigs: a deleted key must be set; values parse as doubles."""
    ops: dict[str, float | None] = {}
    for key, value in to_set.items():
        ops[key] = _parse_double(key, value)
    with open_admin(args) as admin:
        current = admin.describe_client_quotas(_components(entities), strict=True)
        old = next(iter(current.values()), {})
        invalid = [k for k in to_delete if k not in old]
        if invalid:
            raise ToolError(f"Invalid config(s): {','.join(invalid)}")
        for key in to_delete:
            ops[key] = None
        entity = _wire_entity(entities)
        results = admin.alter_client_quotas({entity: ops})
        for error in results.values():
            if error is not None:
                raise error


def _parse_double(key: str, value: str) -> float:
    """Java's Double.parseDouble, near enough: decimal and exponent forms, NaN, Infinity."""
    text = value.strip()
    try:
        if "_" in text:
            raise ValueError(text)
        return float(text[:-1] if text[-1:] in "dDfF" and text[:-1] else text)
    except ValueError:
        raise ToolError(f"Cannot parse quota configuration value for {key}: {value}") from None


def _describe(args, entities, scram: Any) -> int:
    with open_admin(args) as admin:
        found = admin.describe_client_quotas(_components(entities), strict=True)
    for entity, values in sorted(found.items(), key=_entity_order):
        parts = dict(entity)
        label = ", ".join(
            (f"{_LABEL[t]} '{parts[t]}'" if parts[t] else f"the default {_LABEL[t]}")
            for t in (USER, CLIENT_ID) if t in parts)
        text = ", ".join(f"{k}={java_double(v)}" for k, v in sorted(values.items()))
        print(f"Quota configs for {label} are {text}")
    types = [t for t, _ in entities]
    # SCRAM credentials of users, unless a client id or a default entity is named (as Kafka)
    if scram is not None and CLIENTS not in types and all(name != "" for _, name in entities):
        name = entities[0][1] if entities else None
        return scram.describe(args, name) or 0
    return 0


def _entity_order(item) -> tuple:
    return tuple((t, n is not None, n or "") for t, n in item[0])


def java_double(value: float) -> str:
    """A double as Java's Double.toString writes it: plain with at least one decimal digit for
    1e-3 <= |x| < 1e7 ("1048576.0", "0.5"), computerized scientific otherwise ("1.048576E7")."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    shortest = Decimal(repr(abs(float(value)))).normalize()
    if 1e-3 <= abs(value) < 1e7:
        text = format(shortest, "f")
        return sign + (text if "." in text else text + ".0")
    _, digits, exponent = shortest.as_tuple()
    figures = "".join(str(d) for d in digits)
    power = len(figures) + int(exponent) - 1
    return f"{sign}{figures[0]}.{figures[1:] or '0'}E{power}"
