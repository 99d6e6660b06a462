"""From a client certificate's distinguished name to a principal name: `ssl.principal.mapping.rules`
as Kafka's `SslPrincipalMapper` reads and applies them (pure: strings in, strings out).

The value is a comma-separated list of rules, tried in order; the first that applies gives the
name:

- `DEFAULT` gives the distinguished name itself (RFC 2253 form, as Java's
  `X500Principal.getName()` prints it: `CN=alice,OU=eng,O=example`);
- `RULE:pattern/replacement/` applies when the pattern (a regular expression) matches the whole
  name; the name becomes the replacement, in which `$1`.. refer to the pattern's groups; a final
  `L` or `U` (`RULE:.../.../L`) turns the result to lower or upper case. A `/` or `\\` inside a
  pattern or a replacement is escaped with `\\`.

A name no rule applies to is an error (Kafka's `SslPrincipalMapper.NoMatchingRule`): the
connection's principal cannot be built, and the broker closes it. Patterns are Java regular
expressions; Python's `re` reads the common subset (classes, groups, quantifiers, anchors) alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The grammar of one rule and of the list, after SslPrincipalMapper's RULE_PATTERN and RULE_SPLITTER.
_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_PARSER = re.compile(_RULE)


class NoMatchingRule(ValueError):
    """No rule of ssl.principal.mapping.rules applies to a distinguished name."""


@dataclass(frozen=True, slots=True)
class PrincipalRule:
    is_default: bool
    pattern: re.Pattern | None = None
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.is_default:
            return dn
        assert self.pattern is not None
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(lambda m: _expand(self.replacement, m), dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.is_default:
            return "DEFAULT"
        assert self.pattern is not None
        return f"RULE:{self.pattern.pattern}/{self.replacement}" + (f"/{self.case}" if self.case else "")


def _expand(replacement: str, m: re.Match) -> str:
    """A Java replacement string (`Matcher.appendReplacement`): `\\x` is a literal x, `$n` a group
    (more digits are taken while they still name a group). A `$n` naming no group is kept literally,
    as Kafka's `escapeLiteralBackReferences` arranges."""
    out: list[str] = []
    groups = m.re.groups
    i = 0
    while i < len(replacement):
        c = replacement[i]
        if c == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
            continue
        if c == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            ref = int(replacement[i + 1])
            if ref > groups:
                out.append(c)
                i += 1
                continue
            j = i + 2
            while j < len(replacement) and replacement[j].isdigit() and int(replacement[i + 1:j + 1]) <= groups:
                ref = int(replacement[i + 1:j + 1])
                j += 1
            out.append(m.group(ref) or "")
            i = j
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_rules(text: str | None) -> tuple[PrincipalRule, ...]:
    """The rules of an ssl.principal.mapping.rules value (None: DEFAULT). Raises ValueError naming a
    rule that does not parse or a pattern that does not compile; empty rules are skipped."""
    text = "DEFAULT" if text is None else text
    rules: list[PrincipalRule] = []
    for found in _SPLITTER.finditer(text.strip()):
        rule = found.group(1)
        m = _PARSER.match(rule)
        if m is None:
            raise ValueError(f"Invalid rule: {rule}")
        if m.end() != len(rule):
            raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[m.end():]}`")
        if m.group(1) is not None:
            rules.append(PrincipalRule(True))
        elif m.group(2) is not None:
            try:
                pattern = re.compile(m.group(2))
            except re.error as exc:
                raise ValueError(f"Invalid rule: `{rule}`: the pattern does not compile ({exc})") from None
            rules.append(PrincipalRule(False, pattern, m.group(3), m.group(4)))
        if found.end() == len(text.strip()):
            break
    return tuple(rules)


def principal_name(rules: tuple[PrincipalRule, ...], dn: str) -> str:
    """The principal name of distinguished name `dn` under `rules` (SslPrincipalMapper.getName)."""
    for rule in rules:
        name = rule.apply(dn)
        if name is not None:
            return name
    raise NoMatchingRule(f"No rules apply to {dn}, rules [{', '.join(str(r) for r in rules)}]")
