"""`quafka acls`: add, remove and list ACLs, with kafka-acls.sh's options and output
(org.apache.kafka.tools.AclCommand, Kafka 4.x).

- ``--add``: the ACLs of every (resource, principal, host, operation) the options name; one that
  exists already prints ``Acl <binding> already exists.``; the others print ``Adding ACLs for resource
  `ResourcePattern(...)`:`` and one tab-indented entry a line, then are created.
- ``--remove``: asks ``Are you sure ...? (y/n)`` per resource filter unless ``--force``; without a
  principal it removes every ACL of the resource filter.
- ``--list``: ``Current ACLs for resource `ResourcePattern(...)`:`` and the entries; with
  ``--principal`` only that principal's, under ``ACLs for principal `User:alice```.
- ``--producer`` (WRITE, DESCRIBE, CREATE on topics; WRITE, DESCRIBE on transactional ids;
  IDEMPOTENT_WRITE on the cluster with ``--idempotent``) and ``--consumer`` (READ, DESCRIBE on topics,
  READ on groups) as AclCommand's getProducerResourceFilterToAcls / getConsumerResourceFilterToAcls.
- Operations are checked against what each resource type supports (AclEntry.supportedOperations),
  plus one quafka extension: ALTER on a GROUP, which quafka's in-flight force actions
  (QuafkaAlterInFlight, `quafka share-groups` force release/reject) ask for. kafka-acls.sh refuses it
  (its GROUP list has no ALTER); the broker stores it either way, as Kafka's does.

Kafka prints resources and entries in hash order; quafka sorts them. Errors are one line on stderr and
exit code 1, as quafka's other tools (AclCommand prints ``Error while executing ACL command: ...``
on stdout). ``--bootstrap-controller`` is not offered: quafka has no controller listener.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

from ._common import ToolError, add_bootstrap, kafka_parser_errors, open_admin, run_tool

CLUSTER_NAME = "kafka-cluster"
OPERATIONS = ("ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS",
              "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "CREATE_TOKENS", "DESCRIBE_TOKENS", "TWO_PHASE_COMMIT")
PATTERN_TYPES = ("ANY", "MATCH", "LITERAL", "PREFIXED")
SUPPORTED = {  # AclEntry.supportedOperations (ALL is valid everywhere)
    "TOPIC": {"READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"},
    "GROUP": {"READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
              "ALTER"},  # ALTER: quafka's extension, for the in-flight force actions
    "CLUSTER": {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER",
                "DESCRIBE"},
    "TRANSACTIONAL_ID": {"DESCRIBE", "WRITE"},
    "DELEGATION_TOKEN": {"DESCRIBE"},
    "USER": {"CREATE_TOKENS", "DESCRIBE_TOKENS"},
}

EXAMPLES = """
examples:
  quafka acls --add --allow-principal User:alice --operation Read --topic orders
  quafka acls --add --allow-principal User:alice --consumer --topic orders --group workers
  quafka acls --add --allow-principal User:bob --producer --topic pay- --resource-pattern-type prefixed
  quafka acls --add --deny-principal User:mallory --deny-host 10.0.0.9 --operation All --topic '*'
  quafka acls --list --topic orders
  quafka acls --list --principal User:alice
  quafka acls --remove --allow-principal User:alice --operation Read --topic orders --force

The broker needs authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
(docs/security.md, "ACLs"); the caller needs ALTER (add, remove) or DESCRIBE (list) on the cluster.
"""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "acls", help="add, remove and list ACLs (kafka-acls)",
        description="Add, remove and list the broker's ACLs, with kafka-acls.sh's options and output. "
                    "Exactly one action: --add, --remove or --list.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bootstrap(p)
    actions = p.add_argument_group("actions (exactly one)")
    actions.add_argument("--add", action="store_true", help="add ACLs")
    actions.add_argument("--remove", action="store_true", help="remove ACLs")
    actions.add_argument("--list", action="store_true",
                         help="list ACLs of the resources named (--topic, --group, --cluster, ...), or all")
    res = p.add_argument_group("resources")
    res.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                     help="a topic ('*': every topic); repeatable")
    res.add_argument("--group", action="append", default=[], metavar="GROUP",
                     help="a group ('*': every group); repeatable")
    res.add_argument("--cluster", action="store_true", help="the cluster resource (kafka-cluster)")
    res.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                     help="a transactional id ('*': every one); repeatable")
    res.add_argument("--delegation-token", action="append", default=[], metavar="TOKEN",
                     help="a delegation token id ('*': every one); repeatable")
    res.add_argument("--user-principal", action="append", default=[], metavar="PRINCIPAL",
                     help="a user principal as the resource (for CreateTokens / DescribeTokens); repeatable")
    res.add_argument("--resource-pattern-type", default="LITERAL", metavar="|".join(PATTERN_TYPES).lower(),
                     help="literal (default) or prefixed when adding; when listing or removing also any (any "
                          "pattern type, the exact name) or match (every pattern that applies to the name: "
                          "use with care with --remove)")
    ent = p.add_argument_group("entries")
    ent.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME",
                     help="a principal to allow, e.g. User:alice (User:'*' is every user); repeatable")
    ent.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME",
                     help="a principal to deny; deny rules take precedence over allow rules; repeatable")
    ent.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                     help="a host the allowed principals may come from (default '*': any); repeatable")
    ent.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                     help="a host the denied principals are denied from (default '*': any); repeatable")
    ent.add_argument("--operation", action="append", default=[], metavar="OPERATION",
                     help="an operation to allow or deny (default All): " + ", ".join(_pascal(o) for o in OPERATIONS)
                          + "; repeatable")
    ent.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME",
                     help="with --list: only the ACLs of this principal; repeatable")
    conv = p.add_argument_group("conveniences")
    conv.add_argument("--producer", action="store_true",
                      help="the producer's ACLs: WRITE, DESCRIBE, CREATE on the topics (and WRITE, DESCRIBE on "
                           "--transactional-id)")
    conv.add_argument("--consumer", action="store_true",
                      help="the consumer's ACLs: READ, DESCRIBE on the topics and READ on the --group")
    conv.add_argument("--idempotent", action="store_true",
                      help="with --producer: IDEMPOTENT_WRITE on the cluster too")
    conv.add_argument("--force", action="store_true", help="assume yes to every question (--remove)")
    kafka_parser_errors(p)
    p.set_defaults(func=run)


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _normal(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def parse_operation(text: str) -> str:
    """Kafka's SecurityUtils.operation: Read, READ, read, IdempotentWrite, IDEMPOTENT_WRITE ..."""
    for op in OPERATIONS:
        if _normal(op) == _normal(text.strip()):
            return op
    raise ToolError(f"Invalid operation {text!r}: one of {', '.join(_pascal(o) for o in OPERATIONS)}")


def parse_principal(text: str) -> str:
    text = text.strip()
    kind, sep, name = text.partition(":")
    if not sep or not kind:
        raise ToolError(f"expected a string in format principalType:principalName but got {text}")
    return text


def check_args(args: argparse.Namespace) -> None:
    """AclCommandOptions.checkArgs, in its order and with its messages."""
    if sum((args.add, args.remove, args.list)) != 1:
        raise ToolError("Command must include exactly one action: --list, --add, --remove.")
    if args.list:
        for option, given in (("--producer", args.producer), ("--consumer", args.consumer),
                              ("--allow-host", args.allow_host), ("--allow-principal", args.allow_principal),
                              ("--deny-host", args.deny_host), ("--deny-principal", args.deny_principal)):
            if given:
                raise ToolError(f"Option \"--list\" can't be used with option \"{option}\"")
    for convenience, set_ in (("--producer", args.producer), ("--consumer", args.consumer)):
        if set_:
            for option, given in (("--operation", args.operation), ("--deny-principal", args.deny_principal),
                                  ("--deny-host", args.deny_host)):
                if given:
                    raise ToolError(f"Option \"{convenience}\" can't be used with option \"{option}\"")
    if args.principal and not args.list:
        raise ToolError("The --principal option is only available if --list is set")
    if args.producer and not args.topic:
        raise ToolError("With --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        raise ToolError("The --idempotent option is only available if --producer is set")
    if args.consumer and (not args.topic or not args.group or
                          (not args.producer and (args.cluster or args.transactional_id))):
        raise ToolError("With --consumer you must specify a --topic and a --group and no --cluster or "
                        "--transactional-id option should be specified.")


def pattern_type(args: argparse.Namespace) -> str:
    value = args.resource_pattern_type.strip().upper()
    if value not in PATTERN_TYPES:
        raise ToolError(f"Unknown resource-pattern-type: {args.resource_pattern_type}")
    return value


def resource_filters(args: argparse.Namespace, ptype: str, *, required: bool) -> list[tuple[str, str, str]]:
    """(resource type, name, pattern type) of every resource the options name (getResourceFilter)."""
    out: list[tuple[str, str, str]] = []
    out += [("TOPIC", t.strip(), ptype) for t in args.topic]
    if ptype == "LITERAL" and (args.cluster or args.idempotent):
        out.append(("CLUSTER", CLUSTER_NAME, "LITERAL"))
    out += [("GROUP", g.strip(), ptype) for g in args.group]
    out += [("TRANSACTIONAL_ID", t, ptype) for t in args.transactional_id]
    out += [("DELEGATION_TOKEN", t.strip(), ptype) for t in args.delegation_token]
    out += [("USER", u.strip(), ptype) for u in args.user_principal]
    if not out and required:
        raise ToolError("You must provide at least one resource: --topic <topic> or --cluster or --group <group> "
                        "or --delegation-token <Delegation Token ID>")
    return list(dict.fromkeys(out))


def entries(args: argparse.Namespace, operations: set[str]) -> set[tuple[str, str, str, str]]:
    """(principal, host, operation, permission) of the --allow-/--deny- options (AclCommand.getAcl)."""
    out: set[tuple[str, str, str, str]] = set()
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, "ALLOW"),
                                          (args.deny_principal, args.deny_host, "DENY")):
        hosts = [h.strip() for h in hosts] or (["*"] if principals else [])
        for principal in principals:
            for operation in operations:
                for host in hosts:
                    out.add((parse_principal(principal), host, operation, permission))
    return out


def resource_to_entries(args: argparse.Namespace, ptype: str) -> dict[tuple, set]:
    """getResourceFilterToAcls: the CLI's ACLs, or the --producer / --consumer ones."""
    result: dict[tuple, set] = {}
    if not args.producer and not args.consumer:
        ops = {parse_operation(o) for o in args.operation} or {"ALL"}
        acl_set = entries(args, ops)
        for f in resource_filters(args, ptype, required=True):
            result[f] = set(acl_set)
    if args.producer:
        filters = resource_filters(args, ptype, required=True)
        for f in filters:
            if f[0] == "TOPIC":
                result[f] = entries(args, {"WRITE", "DESCRIBE", "CREATE"})
            elif f[0] == "TRANSACTIONAL_ID":
                result[f] = entries(args, {"WRITE", "DESCRIBE"})
        if args.idempotent:
            result[("CLUSTER", CLUSTER_NAME, "LITERAL")] = entries(args, {"IDEMPOTENT_WRITE"})
    if args.consumer:
        for f in resource_filters(args, ptype, required=True):
            if f[0] == "TOPIC":
                result.setdefault(f, set()).update(entries(args, {"READ", "DESCRIBE"}))
            elif f[0] == "GROUP":
                result.setdefault(f, set()).update(entries(args, {"READ"}))
    for (rtype, _name, _pt), acl_set in result.items():
        valid = SUPPORTED[rtype] | {"ALL"}
        if any(op not in valid for _p, _h, op, _perm in acl_set):
            raise ToolError(f"ResourceType {rtype} only supports operations {', '.join(sorted(valid))}")
    return result


def pattern_text(rtype: str, name: str | None, ptype: str, *, filter_: bool = False) -> str:
    kind = "ResourcePatternFilter" if filter_ else "ResourcePattern"
    return f"{kind}(resourceType={rtype}, name={name}, patternType={ptype})"


def entry_text(principal: str, host: str, operation: str, permission: str) -> str:
    return f"(principal={principal}, host={host}, operation={operation}, permissionType={permission})"


def run(args: argparse.Namespace) -> int:
    return run_tool("acls", lambda: _run(args))


def _run(args: argparse.Namespace) -> int | None:
    check_args(args)
    ptype = pattern_type(args)
    if args.add and ptype not in ("LITERAL", "PREFIXED"):
        raise ToolError(f"A '--resource-pattern-type' value of '{ptype}' is not valid when adding acls.")
    if args.add:
        plan = resource_to_entries(args, ptype)
        if any(not acl_set for acl_set in plan.values()):
            raise ToolError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
        with open_admin(args) as admin:
            _add(admin, plan)
    elif args.remove:
        plan = resource_to_entries(args, ptype)
        with open_admin(args) as admin:
            _remove(admin, plan, args.force)
    else:
        principals = [parse_principal(p) for p in args.principal]
        filters = resource_filters(args, ptype, required=False)
        with open_admin(args) as admin:
            _list(admin, filters, principals)
    return None


def _add(admin, plan: dict[tuple, set]) -> None:
    from quafka.client import AclBinding, AclBindingFilter

    for (rtype, name, ptype), acl_set in sorted(plan.items()):
        existing = set(admin.describe_acls(AclBindingFilter(rtype, name, ptype)))
        new = []
        for principal, host, op, perm in sorted(acl_set):
            binding = AclBinding(rtype, name, ptype, principal, host, op, perm)
            if binding in existing:
                print(f"Acl (pattern={binding.pattern_text()}, entry={binding.entry_text()}) already exists.")
            else:
                new.append(binding)
        if new:
            lines = "\n".join("\t" + b.entry_text() for b in new)
            print(f"Adding ACLs for resource `{pattern_text(rtype, name, ptype)}`: \n {lines}\n")
            for binding, error in admin.create_acls(new).items():
                if error is not None:
                    raise error


def _confirm(force: bool, message: str) -> bool:
    if force:
        return True
    print(message)
    sys.stdout.flush()
    answer = sys.stdin.readline()
    return answer.strip().lower() == "y"


def _remove(admin, plan: dict[tuple, set], force: bool) -> None:
    from quafka.client import AclBindingFilter

    for (rtype, name, ptype), acl_set in sorted(plan.items()):
        where = pattern_text(rtype, name, ptype, filter_=True)
        if not acl_set:
            question = f"Are you sure you want to delete all ACLs for resource filter `{where}`? (y/n)"
            filters = [AclBindingFilter(rtype, name, ptype)]
        else:
            lines = "\n".join("\t" + entry_text(*e) for e in sorted(acl_set))
            question = f"Are you sure you want to remove ACLs: \n {lines}\n from resource filter `{where}`? (y/n)"
            filters = [AclBindingFilter(rtype, name, ptype, p, h, op, perm) for p, h, op, perm in sorted(acl_set)]
        if _confirm(force, question):
            for _f, outcome in admin.delete_acls(filters).items():
                if isinstance(outcome, Exception):
                    raise outcome


def _list(admin, filters: list[tuple[str, str, str]], principals: list[str]) -> None:
    from quafka.client import AclBindingFilter

    if filters:
        found = [b for rtype, name, ptype in filters for b in admin.describe_acls(AclBindingFilter(rtype, name, ptype))]
    else:
        found = admin.describe_acls(AclBindingFilter())
    by_resource: dict[tuple, set] = defaultdict(set)
    for b in found:
        by_resource[(b.resource_type, b.name, b.pattern_type)].add((b.principal, b.host, b.operation,
                                                                     b.permission_type))
    if not principals:
        _print_resources(by_resource)
        return
    for principal in principals:
        print(f"ACLs for principal `{principal}`")
        _print_resources({r: {e for e in acl_set if e[0] == principal} for r, acl_set in by_resource.items()})


def _print_resources(by_resource: dict[tuple, set]) -> None:
    for (rtype, name, ptype), acl_set in sorted(by_resource.items()):
        if not acl_set:
            continue
        lines = "\n".join("\t" + entry_text(*e) for e in sorted(acl_set))
        print(f"Current ACLs for resource `{pattern_text(rtype, name, ptype)}`:\n{lines}\n")
