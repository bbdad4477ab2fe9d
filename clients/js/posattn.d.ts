// posattn.d.ts - hand-written types for posattn.js (the posattnd client).
// Field names inside items, schemes and encode/analyze requests are the
// wire's (snake_case), as openapi.yaml spells them.

/** A tensor loaded at start-up: posattnd --tensor NAME=PATH[:TENSOR]. */
export interface TensorRef {
  readonly ref: string;
}

/** A tensor with its shape; typed-array data goes out as base64 float32. */
export interface ShapedTensor {
  shape: number[];
  data: Float32Array | ArrayLike<number>;
  [wireField: string]: unknown;
}

/** The wire's own tensor forms, passed on as they are. */
export interface WireTensor {
  shape: number[];
  data?: unknown[];
  b64?: string;
  dtype?: "f32" | "f16" | "bf16" | "f64";
  datatype?: string;
}

export type TensorInput = Float32Array | number[] | ShapedTensor | WireTensor | TensorRef;

export type Scheme = string | ({ type: string } & Record<string, unknown>);

export interface AttentionOptions {
  /** a scheme name ("rope") or object ({type: "rope", base: 500000}); default none */
  scheme?: Scheme;
  /** the shape of bare-array q, k and v; qShape, kShape, vShape override it */
  shape?: number[];
  qShape?: number[];
  kShape?: number[];
  vShape?: number[];
  causal?: boolean;
  window?: number;
  key_length?: number | number[] | Int32Array;
  scale?: number;
  return?: Array<"output" | "weights" | "logits" | "q_rot" | "k_rot" | "entropy" | "distance">;
  id?: unknown;
  /** results rounded to this type on the wire (decoded to Float32Array here) */
  outputDtype?: "f32" | "f16" | "bf16";
  /** any other item field of /v1/attention (mask, bias, softcap, q_positions, ...) */
  [wireField: string]: unknown;
}

export interface BatchItem extends Omit<AttentionOptions, "outputDtype"> {
  q?: TensorInput;
  k?: TensorInput;
  v?: TensorInput;
}

/** Result tensors as typed arrays, with their shapes in `shapes`. */
export interface TensorResult {
  shapes: Record<string, number[]>;
  [field: string]: unknown;
}

export interface AttentionResult extends TensorResult {
  /** [Lq, H, Dv] (batched [B, Lq, H, Dv]); absent when `return` left it out */
  output?: Float32Array;
  shape?: number[];
  weights?: Float32Array;
  logits?: Float32Array;
  q_rot?: Float32Array;
  k_rot?: Float32Array;
  entropy?: Float32Array;
  distance?: Float32Array;
  id: unknown;
  timing?: {
    queue_us: number; compute_us: number; cpu_us: number;
    /** q/k/v items: the work done and its fraction of the server's measured peak (docs/api.md) */
    flops?: number; bytes?: number; fraction_of_peak?: number; bound?: "compute" | "memory"; peak_threads?: number;
  };
}

export interface ClientOptions {
  /** sent as "Authorization: Bearer KEY"; default process.env.POSATTN_API_KEY (Node) */
  apiKey?: string | null;
  /** PEM CA bundle for https URLs (Node only); default process.env.POSATTN_CACERT */
  caFile?: string | null;
  /** per request, default 30000 */
  timeoutMs?: number;
}

export type ErrorCode =
  | "MALFORMED_JSON" | "INVALID_ARGUMENT" | "SHAPE_MISMATCH" | "OUT_OF_RANGE" | "UNSUPPORTED"
  | "UNKNOWN_FIELD" | "UNKNOWN_TENSOR" | "UNKNOWN_MODEL" | "UNAUTHORIZED" | "NOT_FOUND"
  | "SESSION_NOT_FOUND" | "METHOD_NOT_ALLOWED" | "SESSION_FULL" | "SESSION_BUSY" | "SESSION_EXISTS"
  | "PAYLOAD_TOO_LARGE" | "INTERNAL" | "NOT_IMPLEMENTED" | "OVERLOADED" | "DRAINING" | "TIMEOUT"
  | "CACHE_FULL"
  // the client's own
  | "TRANSPORT" | "CLIENT_TIMEOUT" | "CONFIG" | "BAD_RESPONSE";

export class PosattnError extends Error {
  constructor(message: string, init?: { code: string; field?: string | null; status?: number; item?: number | null; cause?: unknown });
  readonly name: "PosattnError";
  /** the server's error code, or TRANSPORT / CLIENT_TIMEOUT / CONFIG / BAD_RESPONSE */
  code: ErrorCode | string;
  /** the field the server named (inputs[0].k.shape), or null */
  field: string | null;
  /** HTTP status; 0 when no answer came */
  status: number;
  /** index in the batch for an item's error, else null */
  item: number | null;
}

export class Client {
  constructor(url: string, options?: ClientOptions);
  readonly url: string;
  attention(q: TensorInput, k: TensorInput, v: TensorInput | undefined, options?: AttentionOptions): Promise<AttentionResult>;
  /** one entry per item: a result or a PosattnError (not thrown) */
  attentionBatch(items: BatchItem[], options?: { outputDtype?: "f32" | "f16" | "bf16" }): Promise<Array<AttentionResult | PosattnError>>;
  encode(scheme: Scheme, fields?: Record<string, unknown>): Promise<TensorResult>;
  analyze(analysis: string, fields?: Record<string, unknown>): Promise<TensorResult>;
  schemes(): Promise<{ schemes: Array<Record<string, unknown>>; [field: string]: unknown }>;
  tensors(): Promise<{ tensors: Array<{ name: string; shape: number[]; dtype: string; file: string; tensor: string; bytes: number }> }>;
  health(): Promise<{ status: string }>;
  /** closes kept-alive HTTPS connections of a caFile client */
  close(): void;
}

export function ref(name: string): TensorRef;
export function tensor(data: Float32Array | ArrayLike<number>, shape: ArrayLike<number>): ShapedTensor;
export function bytesToBase64(bytes: Uint8Array): string;
export function base64ToBytes(text: string): Uint8Array;
export function encodeFloat32(values: Float32Array | ArrayLike<number>): string;
export function decodeFloat32(text: string, datatype?: "FP32" | "FP16" | "BF16"): Float32Array;
