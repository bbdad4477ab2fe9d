#!/usr/bin/python3
"""crd_validate.py - offline check of posattn's custom resources (make k8s-validate).

    crd_validate.py KUSTOMIZATION_DIR...

validate.mjs checks the built-in kinds; this checks what it leaves out, in
each folder rendered with `kubectl kustomize`:
  1. schema: every KServe InferenceService and KEDA ScaledObject against the
     openAPIV3Schema of its upstream CRD (crds/, copied byte for byte; the
     copies' git blob ids are checked first), with Debian's python3-jsonschema.
     Unknown fields are errors, as `kubectl apply` (strict field validation)
     makes them: every object schema that lists properties and neither allows
     additionalProperties nor x-kubernetes-preserve-unknown-fields gets
     additionalProperties: false.
  2. posattn's rules: the KServe predictor (container kserve-container, the v2
     health probes, resources, env names posattnd knows, the API key from a
     Secret, grace period above preStop + drain, the autoscaler class's fields),
     the ScaledObject (its target, no second autoscaler on it, its replica
     range, its Prometheus query), the autoscaling/v2 HPA's Pods metrics (served
     by deploy/k8s/prometheus-adapter/config.yaml) and the session Ingresses
     (ingress-nginx's upstream-hash-by on a canary beside a round-robin one).
     Every metric name a query reads must be one posattnd exposes
     (server/runtime/metrics.c) or one deploy/prometheus/rules.yml records.
Then a self-test plants wrong fields and values in copies of the rendered
objects; each must be caught, the schema ones by the schema. Prints
"k8s-crd-validate: N passed, M failed" last; exit 1 on any failure.
"""
import copy
import hashlib
import json
import os
import re
import subprocess
import sys

import jsonschema
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "../../.."))

# (apiVersion, kind) -> (file under crds/, its git blob id: see crds/README.md)
CRDS = {
    ("serving.kserve.io/v1beta1", "InferenceService"):
        ("serving.kserve.io_inferenceservices.yaml", "1e37d05b7a741eb40b9eb01c378dc9dc80eab3d9"),
    ("keda.sh/v1alpha1", "ScaledObject"):
        ("keda.sh_scaledobjects.yaml", "0c31aa3f0ddbc9f833753be303329eda9ca0bc6f"),
}
ADAPTER_CONFIG = os.path.join(ROOT, "deploy/k8s/prometheus-adapter/config.yaml")
RULES = os.path.join(ROOT, "deploy/prometheus/rules.yml")
CONFIG_C = os.path.join(ROOT, "server/runtime/config.c")
METRICS_C = os.path.join(ROOT, "server/runtime/metrics.c")
DRAIN_DEFAULT = 20  # server/runtime/config.c: c->drain_timeout

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

passed = 0
failed = 0


def report(label, results):
    global passed, failed
    for name, errs in results:
        if not errs:
            passed += 1
            print(f"ok   {label}: {name}")
        else:
            failed += 1
            for e in errs:
                print(f"FAIL {label}: {name}: {e}")


# ---------------------------------------------------------------------------
# Schemas


def strict(schema):
    """The schema with unknown fields refused where Kubernetes would prune them."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) if k in ("properties", "items", "additionalProperties", "anyOf", "allOf",
                                 "oneOf", "not") else v for k, v in schema.items()}
    if "properties" in out:
        out["properties"] = {k: strict(v) for k, v in schema["properties"].items()}
        if ("additionalProperties" not in out and
                not schema.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
    return out


def load_crds():
    validators = {}
    for (api_version, kind), (name, blob) in CRDS.items():
        path = os.path.join(HERE, "crds", name)
        data = open(path, "rb").read()
        got = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        if got != blob:
            raise SystemExit(f"crd_validate.py: {path} is not the upstream copy "
                             f"(git blob {got}, crds/README.md says {blob})")
        crd = yaml.load(data, Loader=Loader)
        group, version = api_version.split("/")
        if crd["spec"]["group"] != group or crd["spec"]["names"]["kind"] != kind:
            raise SystemExit(f"crd_validate.py: {path} does not define {kind} in {group}")
        v = next((v for v in crd["spec"]["versions"] if v["name"] == version and v.get("served")), None)
        if v is None:
            raise SystemExit(f"crd_validate.py: {path} serves no version {version}")
        schema = strict(v["schema"]["openAPIV3Schema"])
        jsonschema.Draft7Validator.check_schema(schema)
        validators[(api_version, kind)] = jsonschema.Draft7Validator(schema)
    return validators


def schema_errors(validator, obj):
    errs = []
    for e in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path)):
        path = "/" + "/".join(str(p) for p in e.absolute_path)
        errs.append(f"schema: {path}: {e.message[:300]}")
    meta = obj.get("metadata") or {}
    if not isinstance(meta.get("name"), str) or not meta["name"]:
        errs.append("schema: /metadata/name is missing")
    return errs


# ---------------------------------------------------------------------------
# posattn's rules


def known_env():
    names = set(re.findall(r'"(POSATTN_[A-Z0-9_]+)"', open(CONFIG_C).read()))
    if not names:
        raise SystemExit("crd_validate.py: no POSATTN_* names in server/runtime/config.c")
    return names


def known_series():
    """posattnd's metric names (with _bucket/_sum/_count) and rules.yml's records."""
    names = set()
    for m in re.findall(r'"(posattn_[a-z0-9_]+)"', open(METRICS_C).read()):
        names |= {m, m + "_bucket", m + "_sum", m + "_count"}
    rules = yaml.safe_load(open(RULES))
    records = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    return names, records


def query_errors(query, what, series, namespace=None):
    """A PromQL query reads only series that exist (and, given, the object's namespace)."""
    errs = []
    names, records = series
    # Names outside the label values' quotes ("posattn" is also a namespace).
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', query or "")
    used = set(re.findall(r"(?<![A-Za-z0-9_:])[A-Za-z_:]?[A-Za-z0-9_:]*posattn[A-Za-z0-9_:]*", bare))
    if not used:
        errs.append(f"{what}: the query reads no posattn series: {query!r}")
    for n in sorted(used):
        if n not in names and n not in records:
            errs.append(f"{what}: {n} is neither a metric posattnd exposes nor a rule of rules.yml")
    if namespace is not None:
        m = re.search(r'namespace="([^"]*)"', query or "")
        if not m:
            errs.append(f"{what}: the query does not select the namespace")
        elif m.group(1) != namespace:
            errs.append(f"{what}: the query selects namespace {m.group(1)}, the object is in {namespace}")
    return errs


def env_value(env, name, default):
    e = next((x for x in env if x.get("name") == name), None)
    return e["value"] if e and "value" in e else default


def isvc_rules(o, env_names, series):
    errs = []
    ann = o["metadata"].get("annotations") or {}
    mode = ann.get("serving.kserve.io/deploymentMode")
    if mode not in ("RawDeployment", "Standard"):
        errs.append(f"deploymentMode is {mode!r}, expected RawDeployment (Standard)")
    p = o.get("spec", {}).get("predictor", {})
    c = next((x for x in p.get("containers", []) if x.get("name") == "kserve-container"), None)
    if c is None:
        return errs + ["the predictor has no container named kserve-container"]
    env = c.get("env", [])
    for e in env:
        if e.get("name", "").startswith("POSATTN_") and e["name"] not in env_names:
            errs.append(f"env {e['name']} is not a posattnd variable (posattnd ignores it)")
        if e.get("name") == "POSATTN_API_KEY" and "value" in e:
            errs.append("POSATTN_API_KEY as a literal: the key shows in the spec; use POSATTN_API_KEY_FILE")
    port = int(env_value(env, "POSATTN_PORT", "8080"))
    if port not in [x.get("containerPort") for x in c.get("ports", [])]:
        errs.append(f"no containerPort {port} (POSATTN_PORT)")
    for probe, path in (("readinessProbe", "/v2/health/ready"), ("livenessProbe", "/v2/health/live")):
        got = (c.get(probe) or {}).get("httpGet", {}).get("path")
        if got != path:
            errs.append(f"{probe} path is {got}, expected {path}")
    for kind in ("requests", "limits"):
        for r in ("cpu", "memory"):
            if (c.get("resources", {}).get(kind) or {}).get(r) is None:
                errs.append(f"resources.{kind}.{r} is missing")
    drain = int(env_value(env, "POSATTN_DRAIN_TIMEOUT", str(DRAIN_DEFAULT)))
    cmd = (c.get("lifecycle") or {}).get("preStop", {}).get("exec", {}).get("command", [])
    pre = int(cmd[1]) if len(cmd) == 2 and cmd[0] == "sleep" else 0
    grace = p.get("terminationGracePeriodSeconds", 30)
    if not grace > drain + pre:
        errs.append(f"terminationGracePeriodSeconds={grace} is not above preStop {pre} s + "
                    f"POSATTN_DRAIN_TIMEOUT {drain} s")
    keyfile = env_value(env, "POSATTN_API_KEY_FILE", None)
    secrets = {v["name"] for v in p.get("volumes", []) if "secret" in v}
    if keyfile is None:
        errs.append("no POSATTN_API_KEY_FILE: the API key should come from a Secret")
    elif not any(m["name"] in secrets and keyfile.startswith(m["mountPath"].rstrip("/") + "/")
                 for m in c.get("volumeMounts", [])):
        errs.append(f"POSATTN_API_KEY_FILE {keyfile} is not on a Secret volume")
    csc, psc = c.get("securityContext", {}), p.get("securityContext", {})
    if not (psc.get("runAsNonRoot") or csc.get("runAsNonRoot")):
        errs.append("runAsNonRoot is not true")
    if csc.get("readOnlyRootFilesystem") is not True:
        errs.append("readOnlyRootFilesystem is not true")
    lo, hi = p.get("minReplicas", 1), p.get("maxReplicas")
    if not (isinstance(hi, int) and lo <= hi):
        errs.append(f"minReplicas {lo} / maxReplicas {hi}: no valid range")
    if lo < 2:
        errs.append("minReplicas below 2: one replica leaves no one to fail over to")
    cls = ann.get("serving.kserve.io/autoscalerClass", "hpa")
    metrics = (p.get("autoScaling") or {}).get("metrics", [])
    if cls == "hpa":
        if p.get("scaleMetric") not in ("cpu", "memory") or "scaleTarget" not in p:
            errs.append("autoscalerClass hpa in RawDeployment needs scaleMetric cpu|memory and scaleTarget")
    elif cls == "keda":
        if "scaleMetric" in p or "scaleTarget" in p:
            errs.append("autoscalerClass keda with scaleMetric/scaleTarget: use autoScaling.metrics")
        ext = [m for m in metrics if m.get("type") == "External"]
        if not ext:
            errs.append("autoscalerClass keda without an External metric in autoScaling.metrics")
        for m in ext:
            metric = m.get("external", {}).get("metric", {})
            if metric.get("backend") != "prometheus" or not metric.get("serverAddress"):
                errs.append("the External metric is not a Prometheus query with a serverAddress")
            errs += query_errors(metric.get("query"), "autoScaling External metric", series,
                                 o["metadata"].get("namespace"))
            # KServe's webhook (validateScalingKedaCompExtension) refuses an
            # External metric without target.value: it becomes the threshold.
            if m.get("external", {}).get("target", {}).get("value") is None:
                errs.append("the External metric has no target.value (KServe's threshold for KEDA)")
    else:
        errs.append(f"autoscalerClass {cls!r} is neither hpa nor keda")
    return errs


def key(o):
    return (o["metadata"].get("namespace", ""), o["metadata"].get("name"))


def scaledobject_rules(o, objs, series):
    errs = []
    s = o.get("spec", {})
    t = s.get("scaleTargetRef", {})
    ns = o["metadata"].get("namespace", "")
    if t.get("kind", "Deployment") != "Deployment" or not any(
            x["kind"] == "Deployment" and key(x) == (ns, t.get("name")) for x in objs):
        errs.append(f"scaleTargetRef {t.get('kind', 'Deployment')}/{t.get('name')} is no Deployment here")
    for h in objs:
        r = h.get("spec", {}).get("scaleTargetRef", {})
        if h["kind"] == "HorizontalPodAutoscaler" and key(h)[0] == ns and r.get("name") == t.get("name"):
            errs.append(f"HorizontalPodAutoscaler {key(h)[1]} also scales {t.get('name')}: "
                        "KEDA makes its own, the two would fight")
    lo, hi = s.get("minReplicaCount", 0), s.get("maxReplicaCount", 100)
    if not lo <= hi:
        errs.append("minReplicaCount is above maxReplicaCount")
    if lo < 2:
        errs.append("minReplicaCount below 2: one replica leaves no one to fail over to")
    if "cooldownPeriod" not in s:
        errs.append("no cooldownPeriod")
    prom = [t for t in s.get("triggers", []) if t.get("type") == "prometheus"]
    if not prom:
        errs.append("no prometheus trigger")
    for t in prom:
        md = t.get("metadata", {})
        for f in ("serverAddress", "query", "threshold"):
            if not md.get(f):
                errs.append(f"trigger {t.get('name')}: metadata.{f} is missing")
        errs += query_errors(md.get("query"), f"trigger {t.get('name')}", series, ns)
    return errs


def adapter_metrics(series):
    """{name served by prometheus-adapter: errors of its rule}."""
    out = {}
    cfg = yaml.safe_load(open(ADAPTER_CONFIG))
    for r in cfg.get("rules", []):
        name = (r.get("name") or {}).get("as")
        errs = query_errors(r.get("seriesQuery"), f"adapter rule {name}", series)
        ov = (r.get("resources") or {}).get("overrides", {})
        if {v.get("resource") for v in ov.values()} != {"namespace", "pod"}:
            errs.append(f"adapter rule {name}: not mapped to namespace and pod (a Pods metric needs both)")
        out[name] = errs
    return out


def hpa_rules(h, served):
    errs = []
    for m in h.get("spec", {}).get("metrics", []):
        if m.get("type") != "Pods":
            continue
        name = m.get("pods", {}).get("metric", {}).get("name")
        if name not in served:
            errs.append(f"Pods metric {name} is not served by deploy/k8s/prometheus-adapter/config.yaml")
        else:
            errs += served[name]
    return errs


def ingress_rules(objs):
    out = []
    ings = [o for o in objs if o["kind"] == "Ingress"]
    services = {key(o): o for o in objs if o["kind"] == "Service"}
    pods = [o["spec"]["template"]["metadata"].get("labels", {}) for o in objs if o["kind"] == "Deployment"]

    def paths(i):
        return {(r.get("host"), p.get("path")) for r in i.get("spec", {}).get("rules", [])
                for p in r.get("http", {}).get("paths", [])}

    for i in ings:
        errs = []
        ns = key(i)[0]
        ann = i["metadata"].get("annotations") or {}
        for r in i.get("spec", {}).get("rules", []):
            for p in r.get("http", {}).get("paths", []):
                svc = p.get("backend", {}).get("service", {}).get("name")
                s = services.get((ns, svc))
                if s is None:
                    errs.append(f"backend Service {svc} is not in this rendering")
                elif not any(all(lab.get(k) == v for k, v in s["spec"].get("selector", {}).items())
                             for lab in pods):
                    errs.append(f"Service {svc} selects no Deployment's pods")
        hash_by = ann.get("nginx.ingress.kubernetes.io/upstream-hash-by")
        if hash_by is not None:
            if hash_by != "$http_x_posattn_session":
                errs.append(f"upstream-hash-by is {hash_by!r}, expected $http_x_posattn_session")
            # An empty key hashes to one pod: only requests with the header may use it.
            if ann.get("nginx.ingress.kubernetes.io/canary") != "true" or \
                    ann.get("nginx.ingress.kubernetes.io/canary-by-header", "").lower() != "x-posattn-session":
                errs.append("upstream-hash-by on an Ingress that is not a canary by header X-Posattn-Session: "
                            "stateless requests (empty key) would all reach one pod")
            mains = [j for j in ings if j is not i and
                     (j["metadata"].get("annotations") or {}).get("nginx.ingress.kubernetes.io/canary") != "true"
                     and key(j)[0] == ns and paths(j) == paths(i)]
            if not mains:
                errs.append("no main (round-robin) Ingress with the same hosts and paths beside the canary")
        out.append((f"Ingress {ns}/{key(i)[1]} rules", errs))
    return out


def guarded(rules):
    """The rules' errors; an object too malformed to judge is one error (its schema says why)."""
    try:
        return rules()
    except (TypeError, KeyError, AttributeError, ValueError, IndexError) as e:
        return [f"rules: the object is too malformed to check ({type(e).__name__}: {e})"]


def check(objs, validators, env_names, series, served):
    results = []
    for o in objs:
        v = validators.get((o.get("apiVersion"), o.get("kind")))
        if v is None:
            continue
        ns, name = key(o)
        results.append((f"{o['kind']} {ns}/{name} schema ({o['apiVersion']} CRD)", schema_errors(v, o)))
        rules = (lambda: isvc_rules(o, env_names, series)) if o["kind"] == "InferenceService" else \
            (lambda: scaledobject_rules(o, objs, series))
        results.append((f"{o['kind']} {ns}/{name} rules", guarded(rules)))
    for h in objs:
        if h["kind"] == "HorizontalPodAutoscaler" and any(
                m.get("type") == "Pods" for m in h.get("spec", {}).get("metrics", [])):
            results.append((f"HorizontalPodAutoscaler {key(h)[0]}/{key(h)[1]} Pods metrics",
                            guarded(lambda: hpa_rules(h, served))))
    return results + ingress_rules(objs)


def render(d):
    out = subprocess.run(["kubectl", "kustomize", d], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    return [o for o in yaml.load_all(out.stdout, Loader=Loader) if o]


# ---------------------------------------------------------------------------
# Self-test: every planted error must be caught ("schema": by the schema).


def predictor(objs):
    return next(o for o in objs if o["kind"] == "InferenceService")["spec"]["predictor"]


def scaledobject(objs):
    return next(o for o in objs if o["kind"] == "ScaledObject")["spec"]


def hpa(objs):
    return next(o for o in objs if o["kind"] == "HorizontalPodAutoscaler")["spec"]


def ingress(objs, canary):
    return next(o for o in objs if o["kind"] == "Ingress" and
                (o["metadata"].get("annotations") or {}).get("nginx.ingress.kubernetes.io/canary") == canary)


def _misspell(c):
    c["readinesProbe"] = c.pop("readinessProbe")


BREAKS = [
    # (needs, by, name, break)
    ("InferenceService", "schema", "misspelt readinessProbe in the predictor's container",
     lambda o: _misspell(predictor(o)["containers"][0])),
    ("InferenceService", "schema", "an unknown predictor field (scaleMetrics)",
     lambda o: predictor(o).update(scaleMetrics="cpu")),
    ("InferenceService", "schema", "scaleMetric outside its enum (queue)",
     lambda o: predictor(o).update(scaleMetric="queue")),
    ("InferenceService", "schema", "minReplicas as a string",
     lambda o: predictor(o).update(minReplicas="2")),
    ("InferenceService", "rule", "the container renamed posattnd",
     lambda o: predictor(o)["containers"][0].update(name="posattnd")),
    ("InferenceService", "rule", "readiness on /readyz",
     lambda o: predictor(o)["containers"][0]["readinessProbe"]["httpGet"].update(path="/readyz")),
    ("InferenceService", "rule", "grace period not above the drain",
     lambda o: predictor(o).update(terminationGracePeriodSeconds=20)),
    ("InferenceService/keda", "rule", "the External metric's target without value",
     lambda o: [m["external"]["target"].pop("value") for m in predictor(o)["autoScaling"]["metrics"]]),
    ("ScaledObject", "schema", "HPA's minReplicas in a ScaledObject",
     lambda o: scaledobject(o).update(minReplicas=3)),
    ("ScaledObject", "schema", "a trigger without its type",
     lambda o: scaledobject(o)["triggers"][0].pop("type")),
    ("ScaledObject", "schema", "a threshold as a number (metadata values are strings)",
     lambda o: scaledobject(o)["triggers"][0]["metadata"].update(threshold=6)),
    ("ScaledObject", "schema", "maxReplicaCount as a string",
     lambda o: scaledobject(o).update(maxReplicaCount="20")),
    ("ScaledObject", "rule", "a query on a metric posattnd does not have (posattn_inflight)",
     lambda o: scaledobject(o)["triggers"][0]["metadata"].update(
         query='sum(posattn_inflight{namespace="posattn"})')),
    ("ScaledObject", "rule", "the query in another namespace",
     lambda o: scaledobject(o)["triggers"][0]["metadata"].update(
         query='sum(instance:posattn_in_flight:avg1m{namespace="default"})')),
    ("HorizontalPodAutoscaler/Pods", "rule", "a Pods metric the adapter does not serve",
     lambda o: hpa(o)["metrics"][0]["pods"]["metric"].update(name="posattn_in_flight")),
    ("Ingress", "rule", "upstream-hash-by on the round-robin Ingress",
     lambda o: ingress(o, None)["metadata"].setdefault("annotations", {}).update(
         {"nginx.ingress.kubernetes.io/upstream-hash-by": "$http_x_posattn_session"})),
]


def has(objs, need):
    if need == "HorizontalPodAutoscaler/Pods":
        return any(o["kind"] == "HorizontalPodAutoscaler" and
                   any(m.get("type") == "Pods" for m in o["spec"].get("metrics", [])) for o in objs)
    if need == "InferenceService/keda":
        return any(o["kind"] == "InferenceService" and "autoScaling" in o["spec"].get("predictor", {})
                   for o in objs)
    if need == "Ingress":
        return any(o["kind"] == "Ingress" for o in objs)
    return any(o["kind"] == need for o in objs)


def self_test(renderings, validators, env_names, series, served):
    results = []
    for need, by, name, brk in BREAKS:
        objs = next((r for r in renderings if has(r, need)), None)
        if objs is None:
            results.append((f"catches {name}", [f"no rendering has a {need} to break"]))
            continue
        clean = [e for _, errs in check(objs, validators, env_names, series, served) for e in errs]
        broken = copy.deepcopy(objs)
        brk(broken)
        caught = [e for _, errs in check(broken, validators, env_names, series, served) for e in errs
                  if e not in clean]
        if by == "schema":
            caught = [e for e in caught if e.startswith("schema:")]
        results.append((f"catches {name}" + (f" ({caught[0][:160]})" if caught else ""),
                        [] if caught else [f"passed the {by} checks: the checker is broken"]))
    return results


def main():
    dirs = sys.argv[1:]
    if not dirs:
        print("usage: crd_validate.py KUSTOMIZATION_DIR...", file=sys.stderr)
        return 2
    validators = load_crds()
    env_names, series = known_env(), known_series()
    served = adapter_metrics(series)
    report("prometheus-adapter", [(f"rule {n}", e) for n, e in served.items()])
    renderings = []
    for d in dirs:
        try:
            objs = render(d)
        except RuntimeError as e:
            report(d, [("kubectl kustomize", [str(e)])])
            continue
        renderings.append(objs)
        results = check(objs, validators, env_names, series, served)
        if results:
            report(d, results)
    report("self-test", self_test(renderings, validators, env_names, series, served))
    print(f"k8s-crd-validate: {passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
