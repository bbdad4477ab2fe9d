#!/usr/bin/python3
"""attention_model.py - writes an ONNX model of one ai.onnx Attention node
(opset 23) for bench/peer_ort.py: Q [1, H, Lq, D], K and V [1, Hkv, Lk, D]
(ONNX Runtime's own layout, so no transposes are timed on its side), output
Y [1, H, Lq, D]; scale 1/sqrt(D), is_causal as asked.

    /usr/bin/python3 bench/ort/attention_model.py OUT.onnx Lq Lk H Hkv D CAUSAL

Needs Debian's python3-onnx (make deps-peers). onnx 1.12 predates the
Attention operator, so the model is written without its checker; ONNX
Runtime 1.30 implements the operator.
"""
import sys

from onnx import TensorProto, helper


def main():
    if len(sys.argv) != 8:
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    Lq, Lk, H, Hkv, D, causal = (int(x) for x in sys.argv[2:])
    q = helper.make_tensor_value_info("Q", TensorProto.FLOAT, [1, H, Lq, D])
    k = helper.make_tensor_value_info("K", TensorProto.FLOAT, [1, Hkv, Lk, D])
    v = helper.make_tensor_value_info("V", TensorProto.FLOAT, [1, Hkv, Lk, D])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, H, Lq, D])
    node = helper.make_node("Attention", ["Q", "K", "V"], ["Y"], is_causal=causal,
                            scale=float(D) ** -0.5)
    graph = helper.make_graph([node], "attention", [q, k, v], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)],
                              producer_name="posattn bench")
    model.ir_version = 10
    with open(out, "wb") as f:
        f.write(model.SerializeToString())
    return 0


if __name__ == "__main__":
    sys.exit(main())
