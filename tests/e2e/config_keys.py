#!/usr/bin/python3
"""config_keys.py - docs/models.md's table of config.json keys, against the loader.

Reads the table under "## Config keys and the fields they set" in
docs/models.md (a `key` and the posattn field it sets, per row) and for
every key:
  - the key is read by server/model/ (a string literal there, alone or as
    one of "a|b" alternatives, or a member of the rope dict's known keys);
  - an example below changes that key in a fixture config
    (tests/fixtures/models/), POSTs it to /v1/models/resolve and finds the
    value it should give at the field the table names, in the layer
    given. A key of the table without an example here, or an example whose
    field is not the table's, fails, so the table and the loader cannot
    drift apart unnoticed.

    tests/e2e/harness.sh /usr/bin/python3 tests/e2e/config_keys.py   # starts the servers
    POSATTN_URL=http://127.0.0.1:8080 /usr/bin/python3 tests/e2e/config_keys.py
"""

import copy
import glob
import http.client
import json
import os
import re
import sys
import unittest
import urllib.parse

URL = os.environ.get("POSATTN_URL", "http://127.0.0.1:8080").rstrip("/")
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "models")

YARN = {"rope_type": "yarn", "factor": 4.0}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}  # Hugging Face requires them all
# key: (fixture, patch merged into its config (its text_config when it has
# one), layer, the field as the table names it, the value it must have).
# A field "num_layers" is the model's; the others are the layer's, dotted.
EXAMPLES = {
    "num_attention_heads": ("llama", {"num_attention_heads": 8, "num_key_value_heads": 2}, 0,
                            "num_heads", 8),
    "num_key_value_heads": ("llama", {"num_key_value_heads": 1}, 0, "num_kv_heads", 1),
    "hidden_size": ("llama", {"hidden_size": 128}, 0, "head_dim", 32),
    "head_dim": ("llama", {"head_dim": 32}, 0, "head_dim", 32),
    "num_hidden_layers": ("llama", {"num_hidden_layers": 3}, 0, "num_layers", 3),
    "rope_theta": ("llama", {"rope_theta": 10000.0}, 0, "scheme.base", 10000),
    "partial_rotary_factor": ("llama", {"partial_rotary_factor": 0.5, "rope_scaling": None}, 0,
                              "scheme.rotary_dim", 8),
    "rope_type": ("llama", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, 0,
                  "scheme.scaling", "linear"),
    "type": ("llama", {"rope_scaling": {"type": "linear", "factor": 2.0}}, 0, "scheme.scaling",
             "linear"),
    "rope_scaling": ("llama", {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, 0,
                     "scheme.scaling", "dynamic"),
    "rope_parameters": ("llama", {"rope_scaling": None, "rope_parameters": {
        "rope_type": "linear", "factor": 3.0, "rope_theta": 20000.0}}, 0, "scheme.scaling",
        "linear"),
    "factor": ("llama", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, 0,
               "scheme.factor", 2),
    "original_max_position_embeddings": (
        "llama", {"rope_scaling": dict(LLAMA3, original_max_position_embeddings=4096)}, 0,
        "scheme.original_max_position", 4096),
    "max_position_embeddings": ("llama", {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0},
                                          "max_position_embeddings": 4096}, 0,
                                "scheme.original_max_position", 4096),
    "low_freq_factor": ("llama", {"rope_scaling": dict(LLAMA3, low_freq_factor=2.0)}, 0,
                        "scheme.low_freq_factor", 2),
    "high_freq_factor": ("llama", {"rope_scaling": dict(LLAMA3, high_freq_factor=8.0)}, 0,
                         "scheme.high_freq_factor", 8),
    "beta_fast": ("llama", {"rope_scaling": dict(YARN, beta_fast=16.0)}, 0, "scheme.beta_fast", 16),
    "beta_slow": ("llama", {"rope_scaling": dict(YARN, beta_slow=2.0)}, 0, "scheme.beta_slow", 2),
    "mscale": ("llama", {"rope_scaling": dict(YARN, mscale=0.707, mscale_all_dim=1.0)}, 0,
               "scheme.mscale", 0.707),
    "mscale_all_dim": ("llama", {"rope_scaling": dict(YARN, mscale=1.0, mscale_all_dim=0.5)}, 0,
                       "scheme.mscale_all_dim", 0.5),
    "attention_factor": ("llama", {"rope_scaling": dict(YARN, attention_factor=1.5)}, 0,
                         "scheme.attention_factor", 1.5),
    "truncate": ("llama", {"rope_scaling": dict(YARN, truncate=False)}, 0, "scheme.truncate",
                 False),
    "short_factor": ("phi3", {}, 0, "scheme.short_factor", [1.0, 1.0, 1.1, 1.3, 1.6, 2.0]),
    "long_factor": ("phi3", {}, 0, "scheme.long_factor", [1.0, 1.2, 2.5, 6.0, 14.0, 30.0]),
    "alpha": ("llama", {"rope_scaling": {"rope_type": "dynamic", "alpha": 1000.0}}, 0,
              "scheme.alpha", 1000),
    "mrope_section": ("qwen2_vl", {}, 0, "scheme.mrope_section", [16, 24, 24]),
    "mrope_interleaved": ("qwen3_vl", {}, 0, "scheme.mrope_interleaved", True),
    "sliding_window": ("mistral", {"sliding_window": 1024}, 0, "window", 1024),
    "use_sliding_window": ("qwen2", {"use_sliding_window": True, "max_window_layers": 0}, 0,
                           "window", 4096),
    "max_window_layers": ("qwen2", {}, 1, "window", None),
    "layer_types": ("gpt_oss", {}, 1, "attention", "full_attention"),
    "sliding_window_pattern": ("gemma3", {"sliding_window_pattern": 2}, 1, "attention",
                               "full_attention"),
    "rope_local_base_freq": ("gemma3", {}, 0, "scheme.base", 10000),
    "attn_logit_softcapping": ("gemma2", {}, 0, "softcap", 50),
    "query_pre_attn_scalar": ("gemma2", {"query_pre_attn_scalar": 64}, 0, "scale", 0.125),
    "attention_multiplier": ("granite", {}, 0, "scale", 0.015625),
    "rms_norm_eps": ("qwen3", {"rms_norm_eps": 1e-5}, 0, "q_norm.eps", 1e-5),
    "attention_chunk_size": ("llama4", {}, 0, "chunk_size", 8192),
    "no_rope_layers": ("llama4", {"no_rope_layers": [1, 0, 1, 1]}, 1, "scheme.type", "none"),
    "no_rope_layer_interval": ("llama4", {"no_rope_layers": None, "no_rope_layer_interval": 2},
                               1, "scheme.type", "none"),
    "floor_scale": ("llama4", {"floor_scale": 4096}, 3, "attn_temperature_tuning.floor_scale",
                    4096),
    "attn_scale": ("llama4", {"attn_scale": 0.2}, 3, "attn_temperature_tuning.attn_scale", 0.2),
    "rotary_dim": ("gptj", {}, 0, "scheme.rotary_dim", 8),
    "rotary_pct": ("gpt_neox", {}, 0, "scheme.rotary_dim", 4),
    "rotary_emb_base": ("gpt_neox", {"rotary_emb_base": 20000}, 0, "scheme.base", 20000),
    "n_positions": ("gpt2", {}, 0, "requires.0.shape", [1024, 64]),
    "alibi": ("falcon", {}, 0, "scheme.type", "alibi"),
    "alibi_bias_max": ("mpt", {"attn_config": {"alibi_bias_max": 4}}, 0, "scheme.max_bias", 4),
    "softmax_scale": ("mpt", {"attn_config": {"softmax_scale": 0.5}}, 0, "scale", 0.5),
    "position_embedding_type": ("bert_relative", {}, 0, "scheme.type", "shaw"),
    "relative_attention_num_buckets": ("t5", {"relative_attention_num_buckets": 16}, 0,
                                       "scheme.num_buckets", 16),
    "relative_attention_max_distance": ("t5", {"relative_attention_max_distance": 64}, 0,
                                        "scheme.max_distance", 64),
    "d_kv": ("t5", {}, 0, "head_dim", 16),
    "qk_rope_head_dim": ("deepseek_v3", {}, 0, "mla.rope_dim", 8),
    "qk_nope_head_dim": ("deepseek_v3", {}, 0, "head_dim", 24),
    "rope_interleave": ("deepseek_v3", {"rope_interleave": False}, 0, "scheme.layout", "neox"),
    "is_decoder": ("bert_relative", {"is_decoder": True}, 0, "causal", True),
    "multi_query": ("falcon", {"alibi": False, "multi_query": True}, 0, "num_kv_heads", 1),
}


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


def merge(base, patch):
    """patch into base, member by member for objects but the rope dict
    (replaced whole, so that an example's dict is all there is); None
    removes."""
    for k, v in patch.items():
        if v is None:
            base.pop(k, None)
        elif isinstance(v, dict) and isinstance(base.get(k), dict) \
                and k not in ("rope_scaling", "rope_parameters"):
            merge(base[k], v)
        else:
            base[k] = copy.deepcopy(v)
    return base


def table():
    """[(keys, field)] of docs/models.md's table: the backticked names of the
    first cell (a dotted rope_scaling.NAME counts as NAME) and of the second."""
    with open(os.path.join(ROOT, "docs", "models.md"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"\n## Config keys and the fields they set\n(.*?)(?=\n## )", text, re.S)
    assert m, "docs/models.md has no section 'Config keys and the fields they set'"
    rows = []
    for line in m.group(1).split("\n"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) < 3 or cells[0].startswith("---") or cells[0] == "`config.json` key":
            continue
        keys = [k.split(".")[-1] for k in re.findall(r"`([^`]+)`", cells[0])]
        fields = re.findall(r"`([^`]+)`", cells[1])
        rows.append((keys, fields))
    return rows


def source_keys():
    """Every key server/model/ names: its string literals, split at '|'."""
    names = set()
    for path in glob.glob(os.path.join(ROOT, "server", "model", "*.c")):
        with open(path, encoding="utf-8") as f:
            for lit in re.findall(r'"([^"\\]*)"', f.read()):
                names.update(lit.split("|"))
    return names


def field(doc, layer, path):
    if path == "num_layers":
        return doc["num_layers"]
    run = next(r for r in doc["layers"] if r["first_layer"] <= layer <= r["last_layer"]
               and r.get("stack", "text") in ("text", "encoder"))
    v = run
    for part in path.split("."):
        if isinstance(v, list):
            v = v[int(part)]
        elif v is None or part not in v:
            return None
        else:
            v = v[part]
    return v


class ConfigKeys(unittest.TestCase):
    def test_table(self):
        rows = table()
        self.assertGreater(len(rows), 30, "the table lost rows")
        known = source_keys()
        keys = []
        for row_keys, fields in rows:
            for key in row_keys:
                keys.append(key)
                with self.subTest(key=key):
                    self.assertTrue(key in known, "docs/models.md's key %s is not read by "
                                    "server/model/" % key)
                    self.assertIn(key, EXAMPLES, "no example for %s: add one to EXAMPLES" % key)
                    fixture, patch, layer, path, want = EXAMPLES[key]
                    # n_positions sets the table the item must send: its shape is in requires.
                    shown = "scheme.table" if path == "requires.0.shape" else path
                    self.assertIn(shown, fields, "%s: the table says %s, the example checks %s"
                                  % (key, fields, path))
                    with open(os.path.join(FIXTURES, fixture + ".json"), encoding="utf-8") as f:
                        config = json.load(f)
                    merge(config.get("text_config", config), patch)
                    st, doc = call("POST", "/v1/models/resolve", config)
                    self.assertEqual(st, 200, "%s: %s\n%s" % (key, json.dumps(config)[:500], doc))
                    got = field(doc, layer, path)
                    if isinstance(want, float) and isinstance(got, (int, float)):
                        self.assertAlmostEqual(got, want, places=9, msg=key)
                    else:
                        self.assertEqual(got, want, "%s: layer %d %s" % (key, layer, path))
        self.assertEqual(sorted(set(EXAMPLES) - set(keys)), [],
                         "examples of keys the table does not list")


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=0 if "-q" in sys.argv else 1,
                           argv=[a for a in sys.argv if a != "-q"]).result
    sys.exit(0 if result.wasSuccessful() else 1)
