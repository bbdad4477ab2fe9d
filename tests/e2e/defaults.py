#!/usr/bin/python3
"""defaults.py - every default GET /v1/schemes documents is the one applied.

Reads the schemes' parameters (their `default` and the defaults their
descriptions state: "0 = the default: llama3 8192", "0 = head_dim", ...),
each scheme's `default_scale` and the options' `default`, and for each one
sends a request that leaves the parameter out and the same request giving
the documented value, on every endpoint the scheme serves: /v1/encode,
/v1/analyze (rope_offset, rope_spectrum, similarity) and /v1/attention
(output and weights), and for rope under each scaling that reads the
parameter. Both must answer 200 with the same numbers (bit for bit, or to
1e-6 where the default is a formula the test evaluates in double). A
description that mentions a default this script does not know how to check
fails the run, so a new documented default needs a check here.

    tests/e2e/harness.sh /usr/bin/python3 tests/e2e/defaults.py   # starts the servers
    POSATTN_URL=http://127.0.0.1:8080 /usr/bin/python3 tests/e2e/defaults.py
"""

import copy
import http.client
import json
import math
import os
import random
import re
import sys
import unittest
import urllib.parse

URL = os.environ.get("POSATTN_URL", "http://127.0.0.1:8080").rstrip("/")
L, H, D = 6, 2, 8  # sequence length, heads, head dim
DM = H * D  # d_model in layer mode
RNG = random.Random(36)


def call(method, path, body=None):
    u = urllib.parse.urlsplit(URL)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body).encode(),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"null")
    finally:
        conn.close()


def tensor(*shape):
    n = math.prod(shape)
    return {"shape": list(shape), "data": [round(RNG.uniform(-1, 1), 3) for _ in range(n)]}


def numbers(doc):
    """The answer without its timing (which differs run to run)."""
    if isinstance(doc, dict):
        return {k: numbers(v) for k, v in doc.items() if k != "timing"}
    if isinstance(doc, list):
        return [numbers(v) for v in doc]
    return doc


def close(a, b, rtol):
    """a == b, or for numbers within rtol (0: exactly)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], rtol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y, rtol) for x, y in zip(a, b))
    if rtol and isinstance(a, (int, float)) and isinstance(b, (int, float)) \
            and not isinstance(a, bool) and not isinstance(b, bool):
        return abs(a - b) <= rtol * max(abs(a), abs(b), 1e-30)
    return a == b


# The tensors a scheme cannot go without, for attention (and encode where
# it reads them). Drawn once, so every request of a scheme shares them.
Q, K, V = tensor(L, H, D), tensor(L, H, D), tensor(L, H, D)
X, WQ, WK, WV = tensor(L, DM), tensor(DM, H * D), tensor(DM, H * D), tensor(DM, H * D)
SHAW_K = 2
NEEDS = {
    "learned": {"table": tensor(L + 4, DM)},
    "shaw": {"max_relative_position": SHAW_K, "rel_k": tensor(2 * SHAW_K + 1, D),
             "rel_v": tensor(2 * SHAW_K + 1, D)},
    "t5": {"table": tensor(32, H)},
    "kerple": {"r1": [0.5, 1.5], "r2": [1.25, 0.5]},
    "fire": {"w1": [0.5, -1.0, 0.25], "b1": [0.1, 0.2, -0.3],
             "w2": [0.3, -0.2, 0.1, 0.4, -0.5, 0.6], "b2": [0.05, -0.05]},
    "cope": {"pos_emb": tensor(L, D)},
    "rope2d": {"grid": [2, 3]},
}
# shaw's tables follow K: testing K's own default (0) takes 1-row tables.
NEEDS_WITHOUT = {("shaw", "max_relative_position"): {"rel_k": tensor(1, D), "rel_v": tensor(1, D)}}

# Each rope scaling with what it requires (factor, original_max_position, ...).
LONG = [1.0, 1.5, 2.0, 4.0]
SCALINGS = {
    "none": {}, "linear": {"factor": 2}, "ntk": {"factor": 2},
    "dynamic": {"factor": 2, "original_max_position": 4},
    "yarn": {"factor": 4, "original_max_position": 16}, "llama3": {},
    "longrope": {"original_max_position": 4, "factor": 2, "short_factor": [1.0] * (D // 2),
                 "long_factor": LONG},
    "proportional": {}, "ntk_alpha": {"alpha": 2},
}
# Parameters that only apply under another one's value: the contexts to
# test them in (the scheme's other parameters as sent).
ONLY_UNDER = {
    ("rope2d", "max_res"): {"in_pixels": True},
    ("rope2d", "linear_bands"): {"in_pixels": True},
    ("rope2d", "normalize"): {"variant": "dinov3", "base": 100},
    ("rope2d", "ref_grid"): {},
}


def scheme_of(name, param, extra):
    """The scheme object for a request on scheme name testing param: its
    needs, extra, and never param itself."""
    s = {"type": name}
    s.update(NEEDS.get(name, {}))
    s.update(NEEDS_WITHOUT.get((name, param), {}))
    if (name, param) in NEEDS_WITHOUT:
        s.pop(param, None)
    s.update(extra)
    s.pop(param, None)
    return s


def requests_for(scheme):
    """[(label, path, body)] of scheme (an object): every endpoint that serves it."""
    name = scheme["type"]
    out = []
    item = {"q": Q, "k": K, "v": V, "return": ["output", "weights"]}
    if name in ("sinusoidal", "learned"):
        item = {"x": X, "w_q": WQ, "w_k": WK, "w_v": WV, "num_heads": H, "num_kv_heads": H,
                "return": ["output", "weights"]}
    if name == "fire":
        item["causal"] = True
    if name != "none":
        out.append(("attention", "/v1/attention",
                    {"inputs": [dict(item, scheme=scheme)], "output_encoding": "json"}))
    enc = {
        "sinusoidal": {"length": L, "dim": DM}, "learned": {"length": L},
        "rope": {"length": L, "dim": D}, "xpos": {"length": L, "dim": D},
        "alibi": {"num_heads": H, "q_length": L, "k_length": L},
        "t5": {"num_heads": H, "q_length": L, "k_length": L},
        "shaw": {"q_length": L, "k_length": L}, "kerple": {"q_length": L, "k_length": L},
        "fire": {"q_length": L, "k_length": L}, "rope2d": {"dim": D},
        "sandwich": {"num_heads": H, "q_length": L, "k_length": L},
    }
    if name in enc and not (name == "sandwich" and "hidden_size" not in scheme):
        # sandwich's hidden_size is required by /v1/encode (its 0 = head_dim
        # needs a head): encode is checked where the scheme carries it.
        out.append(("encode", "/v1/encode", dict(enc[name], scheme=scheme)))
    if name in ("rope", "xpos"):
        out.append(("rope_offset", "/v1/analyze",
                    {"analysis": "rope_offset", "scheme": scheme, "q": Q["data"][:D],
                     "k": K["data"][:D], "offsets": [1, 2, 5], "base_position": 3}))
    if name == "rope" and "mrope_section" not in scheme:
        out.append(("rope_spectrum", "/v1/analyze",
                    {"analysis": "rope_spectrum", "scheme": scheme, "head_dim": D,
                     "train_length": 64, "length": 256}))
        # Without train_length it is the scheme's original_max_position
        # (with its scaling's default): only for the scalings that have one.
        if scheme.get("scaling") in ("dynamic", "yarn", "llama3", "longrope"):
            out.append(("rope_spectrum without train_length", "/v1/analyze",
                        {"analysis": "rope_spectrum", "scheme": scheme, "head_dim": D,
                         "length": 256}))
    if name in ("sinusoidal", "learned"):
        out.append(("similarity", "/v1/analyze",
                    dict({"analysis": "similarity", "scheme": scheme, "length": L},
                         **({"dim": DM} if name == "sinusoidal" else {}))))
    return out


def yarn_mscale(f, m):
    return 1.0 if f <= 1 else 0.1 * m * math.log(f) + 1.0


class Defaults(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        st, cls.doc = call("GET", "/v1/schemes")
        assert st == 200, cls.doc
        cls.checked = 0

    def same(self, label, path, without, given, rtol=0.0):
        """The request without the parameter and with its default answer alike."""
        st0, a = call("POST", path, without)
        st1, b = call("POST", path, given)
        what = "%s %s\n without: %s\n given:   %s" % (label, path, json.dumps(without)[:600],
                                                      json.dumps(given)[:600])
        self.assertEqual(st0, 200, "%s\n -> %s" % (what, json.dumps(a)[:400]))
        self.assertEqual(st1, 200, "%s\n -> %s" % (what, json.dumps(b)[:400]))
        # A batch answers 200 with per-item errors.
        for doc in (a, b):
            for out in (doc.get("outputs") or []) if isinstance(doc, dict) else []:
                self.assertNotIn("error", out, "%s\n -> %s" % (what, json.dumps(out)[:400]))
        self.assertTrue(close(numbers(a), numbers(b), rtol),
                        "%s\n answers differ:\n %s\n %s" % (what, json.dumps(numbers(a))[:800],
                                                            json.dumps(numbers(b))[:800]))
        type(self).checked += 1

    def check_value(self, scheme, param, value, extra=None, rtol=0.0):
        """scheme's param left out == param given value, under extra, everywhere."""
        base = scheme_of(scheme, param, extra or {})
        reqs = requests_for(base)
        self.assertTrue(reqs, "no endpoint serves %s %s" % (scheme, base))
        for label, path, body in reqs:
            given = copy.deepcopy(body)
            s = given["inputs"][0]["scheme"] if path == "/v1/attention" else given["scheme"]
            s[param] = value
            self.same("%s.%s=%s (%s)" % (scheme, param, json.dumps(value), label), path, body,
                      given, rtol)

    # ---------------------------------------------------------------- schemes

    def rope_scalings(self, p):
        """The scalings p is read by, and those that require it (where 0 is no default)."""
        names = p.get("scalings") or list(SCALINGS)
        req = p["required"]
        required = [s.strip() for s in req[len("required for "):].split(",")] \
            if req.startswith("required for ") else []
        return names, required

    def test_parameter_defaults(self):
        """Each parameter's `default` field, left out and given."""
        for sch in self.doc["schemes"]:
            for p in sch["parameters"]:
                if p["default"] is None:  # a table: no default to send
                    continue
                name, param, value = sch["name"], p["name"], p["default"]
                with self.subTest(scheme=name, parameter=param):
                    if p["required"] == "required":
                        self.fail("%s.%s has a default but is required" % (name, param))
                    if name == "rope":
                        names, required = self.rope_scalings(p)
                        for sc in names:
                            if sc in required or param == "scaling":
                                continue
                            self.check_value(name, param, value, dict(SCALINGS[sc], scaling=sc))
                        if param == "scaling":
                            self.check_value(name, param, value)
                    elif name == "rope2d" and param == "layout":
                        # Documented: gptj, but neox for variant dinov3 (below).
                        self.check_value(name, param, value)
                        self.check_value(name, param, value, {"variant": "pixtral"})
                    else:
                        self.check_value(name, param, value, ONLY_UNDER.get((name, param)))

    # The defaults descriptions state, each with the check that applies it.
    # A description that says "default" and matches none of these fails.
    def described(self):
        """[(scheme, param, description)] of every parameter whose description
        mentions a default or a 0 that stands for something."""
        out = []
        for sch in self.doc["schemes"]:
            for p in sch["parameters"]:
                if re.search(r"default|\b0 = ", p["description"]):
                    out.append((sch["name"], p["name"], p["description"]))
        return out

    def test_described_defaults(self):
        handled = set()
        for scheme, param, desc in self.described():
            with self.subTest(scheme=scheme, parameter=param):
                # "(0 = the default: llama3 8192)", "(0 = the scaling's default:
                # llama3 8, longrope 1, proportional 1)": per scaling, a number.
                m = re.search(r"\(0 = the (?:scaling's )?default: ([a-z0-9_]+ [\d.]+"
                              r"(?:, [a-z0-9_]+ [\d.]+)*)\)", desc)
                if m:
                    for pair in m.group(1).split(", "):
                        sc, v = pair.split(" ")
                        value = float(v) if "." in v or param == "factor" else int(v)
                        extra = dict(SCALINGS[sc], scaling=sc)
                        extra.pop(param, None)
                        self.check_value(scheme, param, value, extra)
                        self.check_value(scheme, param, 0, extra)
                    handled.add((scheme, param))
                    continue
                if scheme == "rope" and param == "attention_factor":
                    self.assertIn("yarn 0.1 ln(factor) + 1", desc)
                    self.assertIn("longrope sqrt(1 + ln(factor) / ln(original_max_position))", desc)
                    self.assertIn("1 for the others", desc)
                    for sc, extra in SCALINGS.items():
                        f = extra.get("factor", 0)
                        want = 1.0
                        if sc == "yarn":
                            want = yarn_mscale(f, 1.0)
                        elif sc == "longrope" and f > 1:
                            want = math.sqrt(1 + math.log(f) / math.log(
                                extra["original_max_position"]))
                        self.check_value(scheme, param, want, dict(extra, scaling=sc), rtol=1e-6)
                    ms = {"factor": 4, "original_max_position": 16, "mscale": 0.707,
                          "mscale_all_dim": 1.0}
                    self.check_value(scheme, param,
                                     yarn_mscale(4, 0.707) / yarn_mscale(4, 1.0),
                                     dict(ms, scaling="yarn"), rtol=1e-6)
                    handled.add((scheme, param))
                    continue
                if "0 = head_dim" in desc:
                    self.check_value(scheme, param, D)
                    if scheme == "sandwich":  # and /v1/encode, where it is required
                        st, _ = call("POST", "/v1/encode", {"scheme": {"type": "sandwich"},
                                                            "num_heads": H, "q_length": L,
                                                            "k_length": L})
                        self.assertEqual(st, 400, "sandwich encode without hidden_size")
                    handled.add((scheme, param))
                    continue
                if scheme == "cope" and "0 = pos_emb's rows" in desc:
                    self.check_value(scheme, param, NEEDS["cope"]["pos_emb"]["shape"][0])
                    self.check_value(scheme, param, 0)
                    handled.add((scheme, param))
                    continue
                m = re.search(r"\(0 = ([\d.]+), ", desc)
                if m:  # rope2d max_res: "(0 = 224, timm's default)"
                    self.check_value(scheme, param, float(m.group(1)),
                                     ONLY_UNDER.get((scheme, param)))
                    handled.add((scheme, param))
                    continue
                m = re.search(r"default (\w+), (\w+) for variant (\w+)", desc)
                if m:  # rope2d layout
                    field = next(p["default"] for s in self.doc["schemes"] if s["name"] == scheme
                                 for p in s["parameters"] if p["name"] == param)
                    self.assertEqual(field, m.group(1))
                    self.check_value(scheme, param, m.group(2),
                                     {"variant": m.group(3), "base": 100})
                    handled.add((scheme, param))
                    continue
                m = re.search(r"\(default (false|true)\b", desc)
                if m:  # rope2d linear_bands: the field must say the same
                    field = next(p["default"] for s in self.doc["schemes"] if s["name"] == scheme
                                 for p in s["parameters"] if p["name"] == param)
                    self.assertEqual(field, m.group(1) == "true")
                    handled.add((scheme, param))
                    continue
                # Mentions that are no default of posattn's: the peer's own
                # default (timm's in_pixels=True, HF's truncation), "0 = unset"
                # (no value to send), a required field's absence (rotary_dim's
                # "0 = head_dim" is above).
                if re.search(r"RotaryEmbeddingCat's default|as HF does by default|\(0 = unset\)|"
                             r"see mscale \(0 = unset\)", desc):
                    handled.add((scheme, param))
                    continue
                self.fail("%s.%s documents a default this test does not check: %r"
                          % (scheme, param, desc))

    def test_default_scale(self):
        """Each scheme's default_scale: 1/sqrt(head_dim), or 1.0 (t5)."""
        for sch in self.doc["schemes"]:
            name = sch["name"]
            with self.subTest(scheme=name):
                value = {"1/sqrt(head_dim)": 1 / math.sqrt(D), "1.0": 1.0}[sch["default_scale"]]
                if name in ("sinusoidal", "learned"):
                    body = {"x": X, "w_q": WQ, "w_k": WK, "w_v": WV, "num_heads": H,
                            "num_kv_heads": H}
                else:
                    body = {"q": Q, "k": K, "v": V}
                body.update(scheme=scheme_of(name, "", {}), causal=name == "fire",
                            **{"return": ["output", "weights"]})
                self.same("%s default_scale" % name, "/v1/attention",
                          {"inputs": [body], "output_encoding": "json"},
                          {"inputs": [dict(body, scale=value)], "output_encoding": "json"},
                          rtol=1e-6)

    # --------------------------------------------------------------- analyses

    def test_analysis_defaults(self):
        """The analyses' own defaults, as openapi.yaml's /v1/analyze states them
        (they are request fields, not scheme parameters): permutation
        reversed, rope_offset's offsets -16..16 with base_position and
        positions from them, similarity's shift 1, rope_spectrum's length =
        train_length, extrapolation's band = train_length, num_kv_heads =
        num_heads and causal true."""
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                               "openapi.yaml"), encoding="utf-8") as f:
            doc = f.read()
        for phrase in ("(default: reversed order)", "`offsets` (default -16..16)",
                       "defaults to m and `positions` to m..m+63 (16 and 16..79 for the",
                       "`shift` (sinusoidal only, default 1)", "`length` (default train_length)",
                       "optional `band` (default train_length)", "`causal` (default true)",
                       "num_kv_heads: {type: integer, format: int32, minimum: 1, description: "
                       "default num_heads}"):
            self.assertIn(phrase, doc, "openapi.yaml no longer says this default: update the test")
        rope = {"type": "rope"}
        item = {"scheme": {"type": "alibi"}, "q": Q, "k": K, "v": V}
        ext = {"analysis": "extrapolation", "scheme": rope, "train_length": 16,
               "lengths": [16, 32], "inputs": "gaussian", "num_heads": H, "head_dim": D, "seed": 7}
        cases = [
            ("permutation", dict(item, analysis="permutation"),
             {"permutation": list(range(L - 1, -1, -1))}),
            ("rope_offset offsets", {"analysis": "rope_offset", "scheme": rope,
                                     "q": Q["data"][:D], "k": K["data"][:D]},
             {"offsets": list(range(-16, 17))}),
            ("rope_offset base_position, positions",
             {"analysis": "rope_offset", "scheme": rope, "q": Q["data"][:D], "k": K["data"][:D],
              "offsets": [-5, 1, 3]},
             {"base_position": 5, "positions": list(range(5, 5 + 64))}),
            ("similarity shift", {"analysis": "similarity", "scheme": {"type": "sinusoidal"},
                                  "length": L, "dim": DM}, {"shift": 1}),
            ("rope_spectrum length", {"analysis": "rope_spectrum", "scheme": rope, "head_dim": D,
                                      "train_length": 100}, {"length": 100}),
            ("extrapolation band", ext, {"band": 16}),
            ("extrapolation num_kv_heads", ext, {"num_kv_heads": H}),
            ("extrapolation causal", ext, {"causal": True}),
        ]
        for label, body, given in cases:
            with self.subTest(analysis=label):
                self.same(label, "/v1/analyze", body, dict(body, **given))

    # ---------------------------------------------------------------- options

    def option_item(self, name):
        """An attention item that uses option name (with none of its defaults)."""
        item = {"q": Q, "k": K, "v": V, "scheme": {"type": "rope"},
                "return": ["output", "weights"]}
        if name in ("q_norm", "k_norm"):
            item[name] = {"weight": tensor(D)}
        elif name == "attn_temperature_tuning":
            # Past floor_scale, so that the factor is not 1.
            item.update({name: {}, "q_positions": list(range(20000, 20000 + L)),
                         "k_positions": list(range(20000, 20000 + L))})
        elif name == "differential":
            item.update({"q": tensor(L, 2 * H, D), "k": tensor(L, 2 * H, D),
                         "v": tensor(L, H, 2 * D), name: {"lambda": 0.5}})
        elif name == "mla":
            item.update({"q": tensor(L, H, D + 4), "k": tensor(L, H, D), "v": tensor(L, H, D),
                         "k_rope": tensor(L, 4), name: {"rope_dim": 4}})
        elif name in ("k_prerotated", "compute_dtype"):
            pass
        else:
            self.fail("option %s has a default this test does not know how to use" % name)
        return item

    def test_option_defaults(self):
        """Each option's `default`: a scalar left out and given, or each member
        of an object left out and given."""
        seen = []
        for o in self.doc["options"]:
            if "default" not in o:
                continue
            name, default = o["name"], o["default"]
            seen.append(name)
            with self.subTest(option=name):
                item = self.option_item(name)
                if isinstance(default, dict):
                    for member, value in default.items():
                        given = copy.deepcopy(item)
                        given[name][member] = value
                        self.same("%s.%s=%s" % (name, member, json.dumps(value)), "/v1/attention",
                                  {"inputs": [item], "output_encoding": "json"},
                                  {"inputs": [given], "output_encoding": "json"})
                    every = copy.deepcopy(item)
                    every[name].update(default)
                    self.same("%s with every default" % name, "/v1/attention",
                              {"inputs": [item], "output_encoding": "json"},
                              {"inputs": [every], "output_encoding": "json"})
                else:
                    self.same("%s=%s" % (name, json.dumps(default)), "/v1/attention",
                              {"inputs": [item], "output_encoding": "json"},
                              {"inputs": [dict(item, **{name: default})], "output_encoding": "json"})
        # The options whose shape string shows defaults must carry them.
        for o in self.doc["options"]:
            if re.search(r'"(eps|floor_scale|absorbed|subln)": ', o.get("shape") or ""):
                self.assertIn(o["name"], seen, "%s shows defaults in its shape but has no "
                              "default member" % o["name"])


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=0 if "-q" in sys.argv else 1,
                           argv=[a for a in sys.argv if a != "-q"]).result
    print("defaults: %d requests compared" % (Defaults.checked * 2))
    sys.exit(0 if result.wasSuccessful() else 1)
