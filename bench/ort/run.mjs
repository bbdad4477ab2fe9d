// run.mjs - the ONNX Runtime side of bench/peer_ort.py: loads a model from
// bench/ort/attention_model.py, feeds random Q, K, V of its shapes and
// prints the best-of-reps seconds of session.run (after a warm-up call).
//
//   node bench/ort/run.mjs MODEL Lq Lk H Hkv D THREADS REPS
//
// CPU execution provider, intra-op threads = THREADS, one inter-op thread,
// sequential execution: the settings of a server answering one request.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const ort = require('onnxruntime-node');

const [model, ...nums] = process.argv.slice(2);
const [Lq, Lk, H, Hkv, D, threads, reps] = nums.map(Number);
if (!model || nums.length !== 7 || nums.some((x) => !(x > 0))) {
  console.error('usage: node run.mjs MODEL Lq Lk H Hkv D THREADS REPS');
  process.exit(2);
}

function rand(n, seed) {
  const a = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    a[i] = ((s >>> 8) & 0xffff) / 32768 - 1;
  }
  return a;
}

const session = await ort.InferenceSession.create(model, {
  executionProviders: ['cpu'],
  intraOpNumThreads: threads,
  interOpNumThreads: 1,
  executionMode: 'sequential',
  graphOptimizationLevel: 'all',
});
const feeds = {
  Q: new ort.Tensor('float32', rand(H * Lq * D, 1), [1, H, Lq, D]),
  K: new ort.Tensor('float32', rand(Hkv * Lk * D, 2), [1, Hkv, Lk, D]),
  V: new ort.Tensor('float32', rand(Hkv * Lk * D, 3), [1, Hkv, Lk, D]),
};
let out = await session.run(feeds); // warm-up
let best = Infinity;
for (let r = 0; r < reps; r++) {
  const t0 = process.hrtime.bigint();
  out = await session.run(feeds);
  best = Math.min(best, Number(process.hrtime.bigint() - t0) * 1e-9);
}
const y = out.Y.data;
for (let i = 0; i < y.length; i++) {
  if (!(Math.abs(y[i]) <= 1)) {
    console.error(`run.mjs: Y[${i}] = ${y[i]} is not a convex combination of v`);
    process.exit(1);
  }
}
console.log(best.toFixed(9));
