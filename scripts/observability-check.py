#!/usr/bin/env python3
"""Checks the Grafana dashboard and the Prometheus rules against the metrics pinhook exports.

Usage:
  scripts/observability-check.py names [--scrape FILE]
      every metric an expression of charts/pinhook/files/pinhook-dashboard.json or
      charts/pinhook/files/pinhook-rules.yaml uses is one pinhook exports, with labels it has
      (or a label the scrape adds: namespace, job, ...), and every label value they match is a
      string pinhook's source writes. The exported metrics are read from src/metrics.rs; with
      --scrape FILE (the /metrics text of a running pinhook), the scrape must agree: every
      pinhook_ sample in it is one src/metrics.rs names, with those labels, and every metric
      without labels is there (a family appears only once it has a sample), and every
      selector of the rules matches a series of the scrape.
  scripts/observability-check.py promql OUT
      writes the dashboard's expressions as recording rules to OUT, Grafana's variables
      replaced, for `promtool check rules OUT` to parse.

Needs PyYAML (the chart tools' Python, scripts/install-helm.sh).
"""

import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "charts/pinhook/files/pinhook-dashboard.json"
RULES = ROOT / "charts/pinhook/files/pinhook-rules.yaml"
METRICS_RS = ROOT / "src/metrics.rs"

# Labels a scrape adds (Prometheus, the Prometheus Operator, the kubernetes-pods convention),
# and `le` of histogram buckets.
TARGET_LABELS = {"namespace", "job", "instance", "pod", "container", "service"}
# PromQL words that are neither metrics nor labels.
KEYWORDS = {"and", "or", "unless", "bool", "by", "without", "on", "ignoring", "group_left",
            "group_right", "offset", "inf", "nan"}
# Grafana's variables, as promtool must read them.
GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}


def fail(problems):
    for p in problems:
        print(p)
    sys.exit(1 if problems else 0)


# === what pinhook exports ===


def exported_from_source():
    """({sample name: set of labels}, the samples of metrics without labels) from
    src/metrics.rs. A metric without labels is always in a scrape; a family only once it has a
    sample."""
    text = METRICS_RS.read_text()
    structs = {}
    for name, body in re.findall(r"pub struct (\w+Labels) \{(.*?)\n\}", text, re.S):
        structs[name] = set(re.findall(r"pub (\w+):", body))
    kinds = {}  # variable -> (kind, labels)
    for var, labels, kind in re.findall(r"let (\w+) =\s*Family::<(\w+), (\w+)>", text):
        kinds[var] = (kind, structs[labels])
    for var, kind in re.findall(r"let (\w+) = (Counter|Gauge)::default\(\)", text):
        kinds[var] = (kind, set())
    for var in re.findall(r"let (\w+) = duration_histogram\(\)", text):
        kinds[var] = ("Histogram", set())
    exported, plain = {}, set()
    calls = re.findall(r'registry\.(register|register_with_unit)\(\s*"(\w+)",(.*?)(\w+)\.clone\(\),?\s*\);', text, re.S)
    if not calls:
        sys.exit(f"{METRICS_RS}: no registry.register calls found")
    for call, name, middle, var in calls:
        if var not in kinds:
            sys.exit(f"{METRICS_RS}: cannot tell the type of {var} (registered as {name})")
        kind, labels = kinds[var]
        family = "pinhook_" + name
        if call == "register_with_unit":
            unit = re.search(r"Unit::(\w+)", middle).group(1).lower()
            family += "_" + unit
        samples = samples_of(family, kind.lower(), labels)
        exported.update(samples)
        if not labels:
            plain.update(samples)
    return exported, plain


def samples_of(family, kind, labels):
    if kind == "counter":
        return {family + "_total": set(labels)}
    if kind == "gauge":
        return {family: set(labels)}
    if kind == "histogram":
        return {family + "_bucket": set(labels) | {"le"}, family + "_sum": set(labels),
                family + "_count": set(labels)}
    sys.exit(f"{family}: unknown metric type {kind}")


def exported_from_scrape(path):
    """({sample name: labels seen}, [(name, {label: value})]) from the text exposition in
    `path`."""
    exported, samples = {}, []
    for line in Path(path).read_text().splitlines():
        m = re.match(r"# TYPE (\S+) (counter|gauge|histogram)$", line)
        if m:
            exported.update(samples_of(m.group(1), m.group(2), set()))
            continue
        m = re.match(r"([a-zA-Z_:][\w:]*)(\{(.*)\})? ", line)
        if m and not line.startswith("#"):
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
            exported.setdefault(m.group(1), set()).update(labels)
            samples.append((m.group(1), labels))
    return exported, samples


def selectors_of(expr):
    """(metric name or None, [(label, op, value)]) of each selector in `expr`."""
    out = []
    for m in re.finditer(r"([a-zA-Z_:][\w:]*)?\s*\{([^}]*)\}", grafana_free(expr)):
        out.append((m.group(1), re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"', m.group(2))))
    for m in re.finditer(r"\b(pinhook_\w+)\b(?!\s*\{)", expr):
        out.append((m.group(1), []))
    return out


def matches(labels, matchers):
    for label, op, value in matchers:
        if label in TARGET_LABELS:
            continue
        have = labels.get(label, "")
        ok = {"=": have == value, "!=": have != value,
              "=~": re.fullmatch(value, have) is not None, "!~": re.fullmatch(value, have) is None}[op]
        if not ok:
            return False
    return True


# === what the dashboard and the rules use ===


def dashboard_exprs():
    """(where, expr) of every query of the dashboard, its variables' included."""
    dash = json.loads(DASHBOARD.read_text())
    out = []

    def panels(ps):
        for p in ps:
            yield p
            yield from panels(p.get("panels", []))

    for p in panels(dash["panels"]):
        for t in p.get("targets", []):
            out.append((f"panel {p['title']!r} {t['refId']}", t["expr"]))
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q.strip())
            if not m:
                sys.exit(f"variable {v['name']}: not label_values(selector, label): {q}")
            # The label it lists must be on the selector's metric too.
            out.append((f"variable {v['name']}", f"sum by ({m.group(2)}) ({m.group(1)})"))
    return out


def rule_exprs():
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [(f"rule {r.get('alert') or r.get('record')}", r["expr"]) for g in groups for r in g["rules"]]


def grafana_free(expr):
    for k, v in GRAFANA_VARS.items():
        expr = expr.replace(k, v)
    return expr


def problems_of(where, expr, exported, values):
    """What is wrong with `expr`: metrics pinhook does not export, labels they lack, label
    values no source file writes."""
    problems = []
    expr = grafana_free(expr)
    # Selectors: name{matchers}; the matchers' strings are read before strings are dropped.
    selectors = []
    for m in re.finditer(r"([a-zA-Z_:][\w:]*)?\s*\{([^}]*)\}", expr):
        matchers = re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"', m.group(2))
        selectors.append((m.group(1), matchers))
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    bare = re.sub(r"\{[^}]*\}", "", bare)
    bare = re.sub(r"\[[^\]]*\]", "", bare)
    grouping = []
    for m in re.finditer(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", bare):
        grouping += [l.strip() for l in m.group(2).split(",") if l.strip()]
    bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", bare)
    names = set()
    for m in re.finditer(r"\b([a-zA-Z_:][\w:]*)\b(\s*\()?", bare):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in KEYWORDS or re.fullmatch(r"\d.*", word):
            continue
        names.add(word)
    for name in sorted(names):
        if not name.startswith("pinhook_"):
            problems.append(f"{where}: {name} is not a pinhook metric")
        elif name not in exported:
            problems.append(f"{where}: pinhook exports no {name}")
    used = {n: exported.get(n, set()) for n in names if n in exported}
    for name, matchers in selectors:
        have = exported.get(name, set()) if name else set().union(*used.values()) if used else set()
        for label, op, value in matchers:
            if label == "__name__":
                for n in re.split(r"\|", value):
                    if n not in exported:
                        problems.append(f"{where}: pinhook exports no {n}")
                continue
            if label not in have | TARGET_LABELS:
                problems.append(f"{where}: {name or 'selector'} has no label {label}")
            if label in TARGET_LABELS or "$" in value or op in ("!=", "!~") and value == "":
                continue
            for v in (re.split(r"\|", value) if op in ("=~", "!~") else [value]):
                if v and v not in values:
                    problems.append(f"{where}: {label}={v!r}: no string \"{v}\" in src/")
    all_labels = set().union(*used.values()) if used else set()
    for label in grouping:
        if label not in all_labels | TARGET_LABELS:
            problems.append(f"{where}: grouping by {label}, which none of {sorted(used)} has")
    return problems


def source_strings():
    """Every string literal of src/**/*.rs: label values must be among them."""
    out = set()
    for f in (ROOT / "src").rglob("*.rs"):
        out.update(re.findall(r'"([\w.-]+)"', f.read_text()))
    return out


def main(argv):
    if len(argv) >= 1 and argv[0] == "names":
        exported, plain = exported_from_source()
        problems, seen = [], ""
        if len(argv) == 3 and argv[1] == "--scrape":
            scraped, samples = exported_from_scrape(argv[2])
            ours = {n for n in scraped if n.startswith("pinhook_")}
            if ours - set(exported):
                problems.append(f"scraped, but not in src/metrics.rs: {sorted(ours - set(exported))}")
            if plain - ours:
                problems.append(f"in src/metrics.rs, but not scraped: {sorted(plain - ours)}")
            for n, labels in scraped.items():
                if n in exported and not labels <= exported[n]:
                    problems.append(f"scrape: {n} has labels {sorted(labels - exported[n])} src/metrics.rs does not name")
            # The alerts' selectors, each matching a series of the real pinhook.
            for where, expr in rule_exprs():
                for name, matchers in selectors_of(expr):
                    if not any(n == name and matches(l, matchers) for n, l in samples):
                        problems.append(f"{where}: no series of the scrape matches {name}{matchers}")
            seen = (f"; {len(ours)} of the {len(exported)} names in the scrape, labels as in src;"
                    " every selector of the rules matches a scraped series")
        elif len(argv) != 1:
            sys.exit(__doc__)
        values = source_strings()
        exprs = dashboard_exprs() + rule_exprs()
        for where, expr in exprs:
            problems += problems_of(where, expr, exported, values)
        if not problems:
            used = set()
            for _, e in exprs:
                used.update(re.findall(r"\bpinhook_\w+", e))
            print(f"{len(exprs)} expressions, {len(used)} metrics, all exported by pinhook{seen}")
        fail(problems)
    elif len(argv) == 2 and argv[0] == "promql":
        rules = [{"record": f"dashboard:query_{i}", "expr": grafana_free(e)}
                 for i, (_, e) in enumerate(dashboard_exprs())]
        Path(argv[1]).write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
