// validate.mjs - offline check of posattn's Kubernetes manifests (make k8s-validate).
//
//   node validate.mjs KUSTOMIZATION_DIR...
//
// Each folder is rendered with `kubectl kustomize` (offline), then every
// object is checked three ways:
//  1. schema: the Kubernetes OpenAPI schema, through the kubernetes-models
//     package (types, required fields, enums, formats);
//  2. unknown fields: kubernetes-models does not reject them, so a misspelt
//     field (`readinesProbe`) would pass; every field the schema validator
//     never looked at is reported;
//     (KServe's InferenceService and KEDA's ScaledObject are left to
//     crd_validate.py, which has their CRDs);
//  3. posattn's rules: probes on /healthz and /readyz, resources, grace
//     period above preStop + drain timeout, non-root and read-only, env names
//     that posattnd knows (from server/runtime/config.c), Prometheus annotations, and
//     the Service, HorizontalPodAutoscaler and PodDisruptionBudget pointing at
//     the Deployment, and a shared --cache-dir (POSATTN_CACHE_SHARED=1) on a
//     writable ReadWriteMany claim of the same rendering.
// Then a self-test breaks a rendered Deployment and HPA in known ways and
// requires each break to be caught, so the checker itself cannot rot into
// passing everything. Prints "k8s-validate: N passed, M failed" last.

import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import YAML from "yaml";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "../../..");

let passed = 0;
let failed = 0;

// ---------------------------------------------------------------------------
// Schema and unknown fields

async function modelFor(apiVersion, kind) {
    // kubernetes-models lays its classes out as <group>/<version> (core: v1).
    if (typeof apiVersion !== "string" || !/^[a-z0-9.]*\/?v[0-9a-z]+$/.test(apiVersion))
        throw new Error(`apiVersion ${JSON.stringify(apiVersion)} is not a Kubernetes API version`);
    let mod;
    try {
        mod = await import(`kubernetes-models/${apiVersion}`);
    } catch {
        throw new Error(`unknown apiVersion ${apiVersion}`);
    }
    const Model = mod[kind];
    if (typeof Model !== "function" || typeof Model.prototype.validate !== "function")
        throw new Error(`unknown kind ${kind} in ${apiVersion}`);
    return Model;
}

// Runs the model's schema validator on a proxy that records every property
// it reads; a field present in the object but never read is one the schema
// does not know. Maps (labels, resources.limits) are iterated by the
// validator, so their keys count as read.
function unknownFields(model) {
    const seen = new Set();
    const wrap = (value, path) => {
        if (value === null || typeof value !== "object") return value;
        return new Proxy(value, {
            get(target, key, receiver) {
                const v = Reflect.get(target, key, receiver);
                if (typeof key !== "string" || !Object.prototype.hasOwnProperty.call(target, key))
                    return v;
                seen.add(`${path}/${key}`);
                return wrap(v, `${path}/${key}`);
            },
            ownKeys(target) {
                for (const key of Reflect.ownKeys(target))
                    if (typeof key === "string") seen.add(`${path}/${key}`);
                return Reflect.ownKeys(target);
            },
        });
    };
    let schemaError = null;
    try {
        model.validate.call(wrap(model, ""));
    } catch (e) {
        schemaError = e;
    }
    const unknown = [];
    const walk = (value, path) => {
        if (value === null || typeof value !== "object") return;
        for (const key of Object.keys(value)) {
            const p = `${path}/${key}`;
            if (!seen.has(p)) unknown.push(p);
            else walk(value[key], p);
        }
    };
    walk(model.toJSON(), "");
    return { unknown, schemaError };
}

async function schemaErrors(obj) {
    const errors = [];
    let Model;
    try {
        Model = await modelFor(obj?.apiVersion, obj?.kind);
    } catch (e) {
        return [e.message];
    }
    const model = new Model(obj);
    try {
        model.validate();
    } catch (e) {
        errors.push(`schema: ${e.message}`);
    }
    const { unknown } = unknownFields(model);
    for (const p of unknown) errors.push(`unknown field ${p}`);
    return errors;
}

// ---------------------------------------------------------------------------
// posattn's rules

// The POSATTN_* variables posattnd reads, from its option table.
function knownEnv() {
    const text = readFileSync(join(root, "server/runtime/config.c"), "utf8");
    const names = new Set(text.match(/"POSATTN_[A-Z0-9_]+"/g)?.map((s) => s.slice(1, -1)) ?? []);
    if (names.size === 0) throw new Error("no POSATTN_* names found in server/runtime/config.c");
    return names;
}

const matches = (selector, labels) =>
    selector && Object.keys(selector).length > 0 &&
    Object.entries(selector).every(([k, v]) => labels?.[k] === v);

function seconds(env, name, fallback) {
    const e = env.find((x) => x.name === name);
    return e && e.value !== undefined ? Number(e.value) : fallback;
}

function deploymentRules(d, envNames) {
    const errs = [];
    const spec = d.spec ?? {};
    const pod = spec.template?.spec ?? {};
    const labels = spec.template?.metadata?.labels ?? {};
    const ann = spec.template?.metadata?.annotations ?? {};
    if (!matches(spec.selector?.matchLabels, labels))
        errs.push("spec.selector.matchLabels do not select the pod template's labels");
    const c = (pod.containers ?? []).find((x) => x.name === "posattnd");
    if (!c) return [...errs, "no container named posattnd"];
    const env = c.env ?? [];
    for (const e of env)
        if (e.name.startsWith("POSATTN_") && !envNames.has(e.name))
            errs.push(`env ${e.name} is not a posattnd variable (posattnd ignores it)`);
    const port = (c.ports ?? []).find((p) => p.name === "http");
    if (!port) errs.push("container has no port named http");
    const envPort = seconds(env, "POSATTN_PORT", 8080);
    if (port && port.containerPort !== envPort)
        errs.push(`port http is ${port.containerPort} but POSATTN_PORT is ${envPort}`);
    const host = env.find((x) => x.name === "POSATTN_HOST");
    if (host && host.value !== "0.0.0.0" && host.value !== "::")
        errs.push(`POSATTN_HOST=${host.value}: a pod must listen on all addresses`);
    const probe = (name, path) => {
        const p = c[name];
        if (!p?.httpGet) errs.push(`${name} is not an httpGet probe`);
        else if (p.httpGet.path !== path) errs.push(`${name} path is ${p.httpGet.path}, expected ${path}`);
    };
    probe("livenessProbe", "/healthz");
    probe("readinessProbe", "/readyz");
    for (const kind of ["requests", "limits"])
        for (const r of ["cpu", "memory"])
            if (c.resources?.[kind]?.[r] === undefined) errs.push(`resources.${kind}.${r} is missing`);
    const drain = seconds(env, "POSATTN_DRAIN_TIMEOUT", 20);
    const cmd = c.lifecycle?.preStop?.exec?.command ?? [];
    const preStop = cmd[0] === "sleep" ? Number(cmd[1]) || 0 : 0;
    const grace = pod.terminationGracePeriodSeconds ?? 30;
    if (!(grace > drain + preStop))
        errs.push(`terminationGracePeriodSeconds=${grace} is not above preStop ${preStop} s + POSATTN_DRAIN_TIMEOUT ${drain} s`);
    const psc = pod.securityContext ?? {};
    const csc = c.securityContext ?? {};
    if (psc.runAsNonRoot !== true && csc.runAsNonRoot !== true) errs.push("runAsNonRoot is not true");
    if (csc.readOnlyRootFilesystem !== true) errs.push("readOnlyRootFilesystem is not true");
    if (csc.allowPrivilegeEscalation !== false) errs.push("allowPrivilegeEscalation is not false");
    if (!(csc.capabilities?.drop ?? []).includes("ALL")) errs.push("capabilities.drop does not include ALL");
    if (ann["prometheus.io/scrape"] !== "true") errs.push('annotation prometheus.io/scrape is not "true"');
    if (port && ann["prometheus.io/port"] !== String(port.containerPort))
        errs.push(`annotation prometheus.io/port is ${ann["prometheus.io/port"]}, expected ${port.containerPort}`);
    if (ann["prometheus.io/path"] !== "/metrics") errs.push("annotation prometheus.io/path is not /metrics");
    return errs;
}

// Rules that relate objects of one rendering.
function relationRules(objs, envNames) {
    const out = []; // [name, errors]
    const deployments = objs.filter((o) => o.kind === "Deployment");
    const key = (o) => `${o.metadata?.namespace ?? ""}/${o.metadata?.name}`;
    for (const d of deployments) out.push([`Deployment ${key(d)} rules`, deploymentRules(d, envNames)]);
    for (const s of objs.filter((o) => o.kind === "Service")) {
        const errs = [];
        const d = deployments.find((x) => (x.metadata?.namespace ?? "") === (s.metadata?.namespace ?? "") &&
            matches(s.spec?.selector, x.spec?.template?.metadata?.labels));
        if (!d) errs.push("selector matches no Deployment's pods");
        else {
            const names = new Set((d.spec.template.spec.containers ?? []).flatMap((c) => (c.ports ?? []).map((p) => p.name)));
            for (const p of s.spec?.ports ?? [])
                if (typeof p.targetPort === "string" && !names.has(p.targetPort))
                    errs.push(`targetPort ${p.targetPort} is no container port name`);
        }
        out.push([`Service ${key(s)} rules`, errs]);
    }
    for (const h of objs.filter((o) => o.kind === "HorizontalPodAutoscaler")) {
        const errs = [];
        const t = h.spec?.scaleTargetRef ?? {};
        const d = deployments.find((x) => t.kind === "Deployment" && x.metadata?.name === t.name &&
            (x.metadata?.namespace ?? "") === (h.metadata?.namespace ?? ""));
        if (h.apiVersion !== "autoscaling/v2") errs.push(`apiVersion ${h.apiVersion}, expected autoscaling/v2`);
        if (!d) errs.push(`scaleTargetRef ${t.kind}/${t.name} is no Deployment here`);
        else if (d.spec.replicas !== undefined)
            errs.push("the Deployment sets spec.replicas: each apply would fight the autoscaler");
        if (!((h.spec?.minReplicas ?? 1) <= h.spec?.maxReplicas)) errs.push("minReplicas is above maxReplicas");
        if (!(h.spec?.minReplicas >= 2)) errs.push("minReplicas below 2: one replica leaves no one to fail over to");
        out.push([`HorizontalPodAutoscaler ${key(h)} rules`, errs]);
    }
    for (const p of objs.filter((o) => o.kind === "PodDisruptionBudget")) {
        const ok = deployments.some((d) => matches(p.spec?.selector?.matchLabels, d.spec?.template?.metadata?.labels));
        out.push([`PodDisruptionBudget ${key(p)} rules`, ok ? [] : ["selector matches no Deployment's pods"]]);
    }
    // A --cache-dir shared by the replicas (POSATTN_CACHE_SHARED=1) must be
    // a volume every pod mounts at once: a ReadWriteMany claim of this
    // rendering, mounted writable at POSATTN_CACHE_DIR.
    for (const d of deployments) {
        const c = (d.spec?.template?.spec?.containers ?? []).find((x) => x.name === "posattnd");
        const env = c?.env ?? [];
        if (env.find((e) => e.name === "POSATTN_CACHE_SHARED")?.value !== "1") continue;
        const errs = [];
        const dir = env.find((e) => e.name === "POSATTN_CACHE_DIR")?.value;
        const mount = (c.volumeMounts ?? []).find((m) => m.mountPath === dir);
        const vol = (d.spec.template.spec.volumes ?? []).find((v) => v.name === mount?.name);
        const claim = objs.find((o) => o.kind === "PersistentVolumeClaim" &&
            o.metadata?.name === vol?.persistentVolumeClaim?.claimName &&
            (o.metadata?.namespace ?? "") === (d.metadata?.namespace ?? ""));
        if (!dir) errs.push("POSATTN_CACHE_SHARED=1 without POSATTN_CACHE_DIR");
        else if (!mount) errs.push(`POSATTN_CACHE_DIR ${dir} is no volume mount of the container`);
        else if (mount.readOnly) errs.push(`the volume at ${dir} is mounted read-only`);
        else if (!vol?.persistentVolumeClaim) errs.push(`the volume at ${dir} is not a PersistentVolumeClaim`);
        else if (!claim) errs.push(`claim ${vol.persistentVolumeClaim.claimName} is not in this rendering`);
        else if (!(claim.spec?.accessModes ?? []).includes("ReadWriteMany"))
            errs.push(`claim ${claim.metadata.name} is not ReadWriteMany: the replicas' pods cannot all mount it`);
        out.push([`Deployment ${key(d)} shared --cache-dir`, errs]);
    }
    return out;
}

// Custom resources: checked against their upstream CRDs by crd_validate.py
// (kubernetes-models knows only the built-in kinds).
const customKinds = new Set(["serving.kserve.io/v1beta1 InferenceService", "keda.sh/v1alpha1 ScaledObject"]);

async function check(docs, envNames) {
    const results = [];
    for (const o of docs) {
        if (customKinds.has(`${o?.apiVersion} ${o?.kind}`)) continue;
        const name = `${o?.kind} ${o?.metadata?.namespace ?? ""}/${o?.metadata?.name} schema`;
        results.push([name, await schemaErrors(o)]);
    }
    return results.concat(relationRules(docs, envNames));
}

function report(label, results) {
    for (const [name, errs] of results) {
        if (errs.length === 0) {
            passed++;
            console.log(`ok   ${label}: ${name}`);
        } else {
            failed++;
            for (const e of errs) console.log(`FAIL ${label}: ${name}: ${e}`);
        }
    }
}

function render(dir) {
    const text = execFileSync("kubectl", ["kustomize", dir], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    const docs = YAML.parseAllDocuments(text);
    for (const d of docs) if (d.errors.length) throw new Error(`${dir}: ${d.errors[0].message}`);
    return docs.map((d) => d.toJS()).filter((o) => o !== null);
}

// ---------------------------------------------------------------------------
// Self-test: each break must be caught.

const breaks = [
    ["misspelt field readinesProbe", (d) => {
        const c = d.spec.template.spec.containers[0];
        c.readinesProbe = c.readinessProbe;
        delete c.readinessProbe;
    }],
    ["unknown field under securityContext", (d) => { d.spec.template.spec.containers[0].securityContext.readOnly = true; }],
    ["containerPort as a string", (d) => { d.spec.template.spec.containers[0].ports[0].containerPort = "8080"; }],
    ["grace period not above the drain", (d) => { d.spec.template.spec.terminationGracePeriodSeconds = 20; }],
    ["writable root filesystem", (d) => { d.spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem = false; }],
    ["misspelt POSATTN_ variable", (d) => {
        d.spec.template.spec.containers[0].env.push({ name: "POSATTN_WORKRES", value: "2" });
    }],
    ["liveness probe on /readyz", (d) => { d.spec.template.spec.containers[0].livenessProbe.httpGet.path = "/readyz"; }],
    ["HPA pointing at another name", (d, h) => { h.spec.scaleTargetRef.name = "posattn"; }],
    ["replicas set beside an HPA", (d) => { d.spec.replicas = 3; }],
    ["a shared --cache-dir on no volume", (d) => {
        const c = d.spec.template.spec.containers[0];
        c.env.push({ name: "POSATTN_CACHE_DIR", value: "/var/lib/posattn/sessions" },
            { name: "POSATTN_CACHE_SHARED", value: "1" });
    }],
];

// Breaks of the sessions-shared overlay's claim (the first rendering that
// has a shared --cache-dir), each of which must be caught too.
const claimBreaks = [
    ["a shared --cache-dir on a ReadWriteOnce claim", (d, pvc) => { pvc.spec.accessModes = ["ReadWriteOnce"]; }],
    ["a shared --cache-dir mounted read-only", (d) => {
        d.spec.template.spec.containers[0].volumeMounts.find((m) => m.name === "sessions").readOnly = true;
    }],
];

async function selfTest(docs, envNames, sharedDocs) {
    const results = [];
    const all = breaks.map(([n, b]) => [n, b, docs]);
    if (sharedDocs) all.push(...claimBreaks.map(([n, b]) => [n, b, sharedDocs]));
    else results.push(["a rendering with a shared --cache-dir to break", ["none of the folders has one"]]);
    for (const [name, breakIt, base] of all) {
        const copy = structuredClone(base);
        const d = copy.find((o) => o.kind === "Deployment");
        const h = copy.find((o) => o.kind === "HorizontalPodAutoscaler");
        const pvc = copy.find((o) => o.kind === "PersistentVolumeClaim");
        breakIt(d, h ?? pvc, pvc);
        const caught = (await check(copy, envNames)).flatMap(([, errs]) => errs);
        results.push([`catches ${name}` + (caught.length ? ` (${caught[0]})` : ""),
            caught.length ? [] : ["passed the checks: the checker is broken"]]);
    }
    return results;
}

// ---------------------------------------------------------------------------

const dirs = process.argv.slice(2);
if (dirs.length === 0) {
    console.error("usage: node validate.mjs KUSTOMIZATION_DIR...");
    process.exit(2);
}
const envNames = knownEnv();
let first = null;
let shared = null;
for (const dir of dirs) {
    let docs;
    try {
        docs = render(dir);
    } catch (e) {
        failed++;
        console.log(`FAIL ${dir}: kubectl kustomize: ${(e.stderr || e.message).toString().trim()}`);
        continue;
    }
    report(dir, await check(docs, envNames));
    first ??= docs;
    if (!shared && docs.some((o) => o.kind === "PersistentVolumeClaim")) shared = docs;
}
if (first) report("self-test", await selfTest(first, envNames, shared));
console.log(`k8s-validate: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed > 0 ? 0 : 1);
