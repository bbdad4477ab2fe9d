#!/usr/bin/python3
"""make_seeds.py - writes the seeds of fuzz_request for the strictness of
issue #29 into tests/fuzz/corpus: half-precision tensors in and out (and
an f16 overflow), batch shapes with per-sequence lengths and positions,
strict JSON at its edges (deep nesting, a repeated key, 1e400, escapes),
requests bounded before any work (a huge rope_spectrum, an extrapolation
past the compute bound), and /v2 framing (FP16 and INT64 binary inputs, a
header length past the end or short of the JSON, a raw binary request).

Byte 0 picks the endpoint (mod 3) or, with bit 7, a /v2 infer request
(byte 1 the model, bytes 2-3 the header length): see fuzz_request.c.
Run it again after changing a seed; the files are committed.
"""
import base64, json, struct, os
D = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
schemes = ["none","sinusoidal","learned","shaw","t5","rope","alibi"]
def w(name, b):
    with open(os.path.join(D, name), "wb") as f: f.write(b)
def v1(ep, obj): w_bytes = bytes([ep]) + json.dumps(obj, separators=(",",":")).encode(); return w_bytes
def f16b(vals): return base64.b64encode(struct.pack("<%de" % len(vals), *vals)).decode()
def bf16b(vals): return base64.b64encode(b"".join(struct.pack("<f", v)[2:] for v in vals)).decode()
q = [0.5, -1, 2, 0.25, 1, 0, -0.5, 3]
# half precision in: dtype on data and on b64; out in f16 and bf16
w("half_f16_b64", v1(0, {"inputs":[{"scheme":{"type":"rope"},"q":{"shape":[2,2,2],"dtype":"f16","b64":f16b(q)},
   "k":{"shape":[2,1,2],"dtype":"bf16","b64":bf16b(q[:4])},"v":{"shape":[2,1,2],"dtype":"f16","data":q[:4]},
   "num_kv_heads":1,"output_dtype":"f16"}],"output_encoding":"b64"}))
w("half_bf16_out", v1(0, {"inputs":[{"scheme":{"type":"alibi"},"q":{"shape":[2,2,2],"datatype":"BF16","data":q},
   "k":{"shape":[2,2,2],"data":q},"v":{"shape":[2,2,2],"dtype":"f64","data":q},"output_dtype":"bf16",
   "return":["output","logits","weights"]}]}))
w("half_overflow", v1(0, {"inputs":[{"scheme":{"type":"none"},"q":{"shape":[1,1,2],"data":[300,300]},
   "k":{"shape":[1,1,2],"data":[300,-300]},"v":{"shape":[1,1,2],"data":[-70000,1]},"output_dtype":"f16",
   "return":["output","logits"]}]}))
# batch shapes: 4-D with key_lengths, query_lengths, M-RoPE rows per sequence
w("batch_lengths", v1(0, {"inputs":[{"scheme":{"type":"rope"},"q":{"shape":[2,2,1,2],"data":q},
   "k":{"shape":[2,3,1,2],"data":q+[1,2,3,4]},"v":{"shape":[2,3,1,2],"data":q+[1,2,3,4]},
   "key_length":[3,1],"query_length":[2,1],"causal":True}]}))
w("batch_positions", v1(0, {"inputs":[{"scheme":{"type":"t5","table":{"shape":[4,1],"data":[0.1,0.2,0.3,0.4]},"num_buckets":4,"max_distance":8},
   "q":{"shape":[2,1,1,2],"data":q[:4]},"k":{"shape":[2,2,1,2],"data":q},"v":{"shape":[2,2,1,2],"data":q},
   "q_positions":[[5],[9]],"k_positions":[[0,4],[8,9]]}]}))
# strict JSON at the edges
w("strict_deep", bytes([0]) + b'{"inputs":' + b"[" * 990 + b"]" * 990 + b"}")
w("strict_dup_key", bytes([1]) + b'{"scheme":{"type":"sinusoidal"},"length":2,"length":3,"dim":4}')
w("strict_big_number", bytes([1]) + b'{"scheme":{"type":"sinusoidal"},"length":1e400,"dim":-0}')
w("strict_escapes", bytes([2]) + b'{"analysis":"rope_spectrum","scheme":{"type":"r\\u006fpe"},"head_dim":8,"train_length":16,"id":"\\ud83d\\ude00"}')
# bounded before work
w("bound_spectrum", bytes([2]) + b'{"analysis":"rope_spectrum","scheme":{"type":"rope"},"head_dim":1073741824,"train_length":100}')
w("bound_extrapolation", bytes([2]) + json.dumps({"analysis":"extrapolation","scheme":{"type":"alibi"},"train_length":8,
   "lengths":[16,32,16384],"inputs":"gaussian","num_heads":2,"head_dim":4,"seed":3}).encode())
# v2 framing: header length past the end, misaligned binary part, FP16 and INT64 binary inputs
def v2(model, hlen, body): return bytes([0x80, schemes.index(model)]) + struct.pack("<H", hlen) + body
hdr = json.dumps({"inputs":[{"name":"q","shape":[1,1,2],"datatype":"FP16","parameters":{"binary_data_size":4}},
   {"name":"k","shape":[1,1,2],"datatype":"FP32","data":[1,2]},{"name":"v","shape":[1,1,2],"datatype":"FP32","data":[3,4]},
   {"name":"q_positions","shape":[1],"datatype":"INT64","parameters":{"binary_data_size":8}}],
   "outputs":[{"name":"output","parameters":{"binary_data":True}}]}).encode()
bin_ = struct.pack("<2e", 0.5, -1) + struct.pack("<q", 7)
w("v2_half_int64", v2("rope", len(hdr), hdr + bin_))
w("v2_header_past_end", v2("rope", len(hdr) + 100, hdr + bin_))
w("v2_header_short", v2("rope", len(hdr) - 3, hdr + bin_))
w("v2_raw_binary", v2("none", 0, bin_))
print("ok", len(os.listdir(D)))
