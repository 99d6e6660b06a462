"""`quafka configs`: describe and alter topic, broker and group configs, as kafka-configs.sh does.

Output follows Kafka 4.4's ConfigCommand: ``Dynamic configs for topic X are:`` (``All configs ...``
with ``--all``) and one ``  key=value sensitive=false synonyms={SOURCE:key=value, ...}`` line per
config, sorted by name; ``Completed updating config for topic X.`` after an alter. Group configs
(``--entity-type groups``) are where share groups get ``share.auto.offset.reset`` and friends.
Users and clients (client quotas, and SCRAM credentials of users) are cli/_client_quotas.py's.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable
from typing import Any

from quafka.client import ConfigEntry

from . import _client_quotas, _scram_credentials
from ._common import ToolError, add_bootstrap, kafka_parser_errors, load_properties, open_admin, run_tool

EXAMPLES = """
examples:
  # the share group 'orders' starts from the earliest offset, and records are locked for 60 s
  quafka configs --entity-type groups --entity-name orders --alter \\
      --add-config share.auto.offset.reset=earliest,share.record.lock.duration.ms=60000
  quafka configs --entity-type groups --entity-name orders --describe
  quafka configs --entity-type groups --entity-name orders --alter --delete-config share.auto.offset.reset

  # topic configs; square brackets group a value that contains commas
  quafka configs --entity-type topics --entity-name jobs --alter --add-config retention.ms=3600000
  quafka configs --entity-type topics --entity-name jobs --describe --all

  # the broker's dynamic configs (entity name = node id; --entity-default: the cluster default)
  quafka configs --entity-type brokers --entity-name 1 --describe
  quafka configs --entity-type brokers --entity-default --alter --add-config message.max.bytes=2097152

  # client quotas: a user, a client id, or a user's client id (entity types in pairs, in order)
  quafka configs --entity-type users --entity-name alice --alter \\
      --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152,request_percentage=50
  quafka configs --entity-type users --entity-name alice --entity-type clients --entity-name app --describe
  quafka configs --entity-type clients --entity-default --alter --delete-config producer_byte_rate
"""

#: kafka-configs' entity types that quafka serves, and the Admin resource names they map to.
ENTITY_TYPES = {"topics": "topic", "brokers": "broker", "groups": "group"}
#: Kafka's ConfigEntry.ConfigSource names by the protocol's ConfigSource id.
CONFIG_SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                  3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
                  6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "DYNAMIC_CLIENT_METRICS_CONFIG", 8: "DYNAMIC_GROUP_CONFIG"}
# Kafka splits --add-config on the commas that are not inside [...]
_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"


# ----------------------------------------------------------------------------- shared with the other tools

def describe_config_entries(admin: Any, resource_type: str, name: str) -> list[ConfigEntry]:
    """Every config of a resource with its source, sensitivity and synonyms; ``name`` "" is the
    cluster-default broker resource. A broker id that is not in the cluster is a ToolError."""
    _check_broker(admin, resource_type, name)
    return admin.describe_config_entries(resource_type, name)


def alter_config_entries(admin: Any, resource_type: str, name: str, set_: dict[str, str],
                         delete: Iterable[str]) -> None:
    """IncrementalAlterConfigs SET/DELETE on a resource (also the default broker resource "")."""
    _check_broker(admin, resource_type, name)
    admin.alter_configs(resource_type, name, set_, delete)


def _check_broker(admin: Any, resource_type: str, name: str) -> None:
    if resource_type != "broker" or not name:
        return
    if not name.isdigit():
        raise ToolError(f"The entity name for brokers must be a valid integer broker id, found: {name}")
    brokers = [b.node_id for b in admin.describe_cluster().brokers]
    if int(name) not in brokers:
        raise ToolError(f"Broker {name} is not in the cluster (brokers: {', '.join(str(b) for b in brokers)})")


# ----------------------------------------------------------------------------- the tool

def add_parser(sub) -> None:
    p = sub.add_parser(
        "configs",
        help="describe and alter topic, broker and group configs (kafka-configs)",
        description="Describe or alter the configs of a topic, a broker or a group, as kafka-configs.sh "
                    "does. Group configs are where share groups get share.auto.offset.reset, "
                    "share.record.lock.duration.ms, share.delivery.count.limit and the other share.* keys.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_bootstrap(p)
    p.add_argument("--describe", action="store_true", help="list the configs of the entity")
    p.add_argument("--alter", action="store_true", help="alter the configs of the entity")
    p.add_argument("--all", action="store_true",
                   help="with --describe: every config, including static and default ones")
    p.add_argument("--entity-type", choices=sorted([*ENTITY_TYPES, "users", "clients"]), metavar="TYPE",
                   action="append", help="topics, brokers, groups, users or clients (users and clients may be "
                                         "given together, each with its --entity-name or --entity-default)")
    p.add_argument("--entity-name", metavar="NAME", action=_client_quotas.ENTITY_NAME_ACTION,
                   help="topic name, broker id, group id, user or client id (--describe without it: every "
                        "entity of the type)")
    p.add_argument("--entity-default", nargs=0, action=_client_quotas.ENTITY_NAME_ACTION, default=False,
                   help="the default entity: brokers (cluster-wide), users, clients")
    p.add_argument("--topic", metavar="NAME", help="shorthand for --entity-type topics --entity-name NAME")
    p.add_argument("--broker", metavar="ID", help="shorthand for --entity-type brokers --entity-name ID")
    p.add_argument("--broker-defaults", action="store_true",
                   help="shorthand for --entity-type brokers --entity-default")
    p.add_argument("--group", metavar="ID", help="shorthand for --entity-type groups --entity-name ID")
    _client_quotas.add_arguments(p)
    p.add_argument("--add-config", metavar="K=V[,K=V]",
                   help="configs to set: 'k1=v1,k2=[v1,v2],k3=v3' (brackets group a value with commas)")
    p.add_argument("--add-config-file", metavar="FILE", help="a properties file of configs to set")
    p.add_argument("--delete-config", metavar="K[,K]", action="append", default=[],
                   help="config keys to remove (revert to the default); comma-separated, repeatable")
    p.add_argument("--force", action="store_true", help="accepted for compatibility; no effect")
    kafka_parser_errors(p)
    p.set_defaults(func=run)


def parse_add_config(text: str) -> dict[str, str]:
    """Kafka's --add-config syntax: k=v pairs split on commas outside [...]; [a,b] → "a,b"."""
    out: dict[str, str] = {}
    for item in re.split("," + _OUTSIDE_BRACKETS, text):
        if not item.strip():
            continue
        parts = re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, item, maxsplit=1)
        if len(parts) != 2 or not parts[0].strip():
            raise ToolError('Invalid entity config: all configs to be added must be in the format "key=val" '
                            'or "key=[val1,val2]"')
        key, value = parts[0].strip(), parts[1].strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        if not re.fullmatch(r"[a-zA-Z0-9._-]*", key):
            raise ToolError(f"Invalid character found for config key: {key}")
        out[key] = value
    return out


def _entity(args: argparse.Namespace) -> tuple[str, str | None]:
    """(entity type, entity name or None; "" = the broker default) from the options."""
    shorthands = [(t, n) for t, n in (("topics", args.topic), ("brokers", args.broker), ("groups", args.group))
                  if n is not None]
    if args.broker_defaults:
        shorthands.append(("brokers", ""))
    types, names = args.entity_type or [], getattr(args, "entity_names", None) or []
    if shorthands and (types or names):
        raise ToolError("--entity-{type,name,default} should not be used in conjunction with specific entity flags")
    if len(shorthands) > 1:
        raise ToolError("Only one entity may be specified")
    if shorthands:
        return shorthands[0]
    if not types:
        raise ToolError("At least one entity type must be specified")
    if len(types) > 1:
        raise ToolError("Only 'users' and 'clients' entity types may be specified together")
    if len(names) > 1:
        raise ToolError("More entity names specified than entity types")
    if names == [""]:
        if types[0] != "brokers":
            raise ToolError(f"--entity-default is not supported for {types[0]} "
                            "(brokers, users and clients have a default entity)")
        return "brokers", ""
    return types[0], names[0] if names else None


def _changes(args: argparse.Namespace) -> tuple[dict[str, str], list[str]]:
    """The configs --alter sets and deletes (none with --describe)."""
    if not args.alter:
        if args.add_config or args.add_config_file or args.delete_config:
            raise ToolError("--add-config, --add-config-file and --delete-config need --alter")
        return {}, []
    if args.add_config and args.add_config_file:
        raise ToolError("Only one of --add-config or --add-config-file must be specified")
    to_set = parse_add_config(args.add_config) if args.add_config else {}
    if args.add_config_file:
        to_set = load_properties(args.add_config_file)
    to_delete = [k.strip() for item in args.delete_config for k in item.split(",") if k.strip()]
    if not to_set and not to_delete:
        raise ToolError("At least one of --add-config, --add-config-file, or --delete-config must be "
                        "specified with --alter")
    return to_set, to_delete


def _format_value(value: str | None) -> str:
    return "null" if value is None else value


def _describe(admin: Any, entity_type: str, names: list[str], describe_all: bool) -> None:
    resource = ENTITY_TYPES[entity_type]
    for name in names:
        entries = describe_config_entries(admin, resource, name)
        if resource == "broker" and name == "":
            print(f"Default configs for {entity_type} in the cluster are:")
            wanted = 3  # DYNAMIC_DEFAULT_BROKER_CONFIG
        else:
            print(f"{'All' if describe_all else 'Dynamic'} configs for {entity_type[:-1]} {name} are:")
            wanted = {"topic": 1, "broker": 2, "group": 8}[resource]
        for e in sorted(entries, key=lambda e: e.name):
            if not describe_all and e.source != wanted:
                continue
            synonyms = ", ".join(f"{CONFIG_SOURCES.get(src, 'UNKNOWN')}:{n}={_format_value(v)}"
                                 for n, v, src in e.synonyms)
            print(f"  {e.name}={_format_value(e.value)} sensitive={str(e.sensitive).lower()} synonyms={{{synonyms}}}")


def _all_names(admin: Any, entity_type: str) -> list[str]:
    if entity_type == "topics":
        return sorted(admin.list_topics(include_internal=True))
    if entity_type == "groups":
        return sorted({g.group_id for g in admin.list_groups()})
    # brokers: every node id, then the cluster default, as Kafka lists them
    return [str(b.node_id) for b in admin.describe_cluster().brokers] + [""]


def run(args: argparse.Namespace) -> int:
    def body() -> int:
        if args.describe == args.alter:
            raise ToolError("Command must include exactly one action: --describe, --alter")
        to_set, to_delete = _changes(args)
        if _client_quotas.handles(args):  # users and clients: client quotas (cli/_client_quotas.py)
            return _client_quotas.run(args, to_set, to_delete, scram=_scram_credentials)
        entity_type, name = _entity(args)
        if args.alter:
            if name is None:
                raise ToolError(f"An entity name must be specified with --alter of {entity_type}")
            if args.all:
                raise ToolError("--all can only be used with --describe")
        with open_admin(args) as admin:
            if args.describe:
                names = [name] if name is not None else _all_names(admin, entity_type)
                _describe(admin, entity_type, names, args.all)
                return 0
            resource = ENTITY_TYPES[entity_type]
            wanted = 3 if (resource == "broker" and name == "") else {"topic": 1, "broker": 2, "group": 8}[resource]
            current = {e.name for e in describe_config_entries(admin, resource, name) if e.source == wanted}
            invalid = [k for k in to_delete if k not in current]
            if invalid:
                raise ToolError(f"Invalid config(s): {','.join(invalid)}")
            alter_config_entries(admin, resource, name, to_set, to_delete)
            if name == "":
                print(f"Completed updating default config for {entity_type} in the cluster.")
            else:
                print(f"Completed updating config for {entity_type[:-1]} {name}.")
            return 0

    return run_tool("configs", body)
