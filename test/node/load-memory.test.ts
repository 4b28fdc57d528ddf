// Peak JS memory while loading stays near one chunk, not one tensor: a Llama 3-style model with a
// 128k x 2048 bf16 embedding table (512 MiB, tied, so one tensor is the whole LM head too) loads
// while process.memoryUsage().arrayBuffers, sampled on every progress event and every 20 ms, stays
// under 64 MiB above what it was before the load. The safetensors bytes are produced on the fly by
// a synthetic ByteSource (nothing on disk, no 512 MiB buffer in the test itself); config and
// tokenizer are a generated llama3 model's (scripts/model-families.ts) at these dims.
//
// It uploads 512 MiB through SwiftShader (about 20 s on a shared 2-core CPU, peak +32 MiB when
// written); WEBGPU_LLAMA_SKIP_MEMORY_TEST=1 skips it. `npm run bench -- --real-shapes` reports the
// same peaks for the real-shape SmolLM2-135M and Llama-3.2-1B models.
import { describe, expect, it } from 'vitest';
import type { ByteSource, ModelFiles } from '../../src/io/files.ts';
import { loadModel } from '../../src/node/index.ts';
import { byteLevelTokenizer, familyConfig, tensorPlan } from '../../scripts/model-families.ts';

const MiB = 2 ** 20;
const VOCAB = 128 * 1024;
const HIDDEN = 2048;

/** A safetensors file of bf16 tensors whose data bytes are computed from their offsets on demand. */
function syntheticSafetensors(plan: { name: string; shape: number[] }[]): ByteSource {
  const header: Record<string, unknown> = { __metadata__: { format: 'pt' } };
  let at = 0;
  for (const t of plan) {
    const bytes = t.shape.reduce((a, b) => a * b, 1) * 2;
    header[t.name] = { dtype: 'BF16', shape: t.shape, data_offsets: [at, at + bytes] };
    at += bytes;
  }
  let json = JSON.stringify(header);
  while ((8 + json.length) % 8 !== 0) json += ' ';
  const headerBytes = new Uint8Array(8 + json.length);
  new DataView(headerBytes.buffer).setBigUint64(0, BigInt(json.length), true);
  headerBytes.set(new TextEncoder().encode(json), 8);
  const size = headerBytes.length + at;
  const produce = (offset: number, length: number): Uint8Array => {
    if (offset < 0 || offset + length > size) throw new Error(`synthetic read [${offset}, ${offset + length}) outside ${size}`);
    const out = new Uint8Array(length);
    for (let i = 0; i < length; i++) {
      const o = offset + i;
      if (o < headerBytes.length) out[i] = headerBytes[o];
      // bf16 little-endian: low byte varies, high byte 0x3c: values in ±[0.0078, 0.0156).
      else out[i] = (o - headerBytes.length) % 2 === 0 ? (o * 7) & 0x7f : 0x3c;
    }
    return out;
  };
  return {
    name: 'model.safetensors',
    size,
    read: async (offset, length) => produce(offset, length),
    async *stream(offset, length, chunkSize = 4 * MiB) {
      for (let at = 0; at < length; at += chunkSize) yield produce(offset + at, Math.min(chunkSize, length - at));
    },
  };
}

describe.skipIf(!!process.env.WEBGPU_LLAMA_SKIP_MEMORY_TEST)('peak JS memory while loading', () => {
  it('a 128k x 2048 embedding table loads with JS array buffers within 64 MiB of the baseline', async () => {
    const config = {
      ...familyConfig('llama3', 'tiny'),
      hidden_size: HIDDEN, head_dim: 64, num_attention_heads: 32, num_key_value_heads: 8, intermediate_size: 64,
      num_hidden_layers: 1, vocab_size: VOCAB, tie_word_embeddings: true,
    };
    const plan = tensorPlan(config);
    expect(plan[0]).toMatchObject({ name: 'model.embed_tokens.weight', shape: [VOCAB, HIDDEN] });
    const specials = ['<|begin_of_text|>', '<|end_of_text|>'];
    const tokenizer = JSON.stringify(byteLevelTokenizer(VOCAB, specials));
    const text: Record<string, string> = {
      'config.json': JSON.stringify({ ...config, bos_token_id: VOCAB - 2, eos_token_id: VOCAB - 1 }),
      'tokenizer.json': tokenizer,
      'tokenizer_config.json': JSON.stringify({ add_bos_token: true, bos_token: specials[0], eos_token: specials[1] }),
    };
    const weights = syntheticSafetensors(plan);
    const files: ModelFiles = {
      id: 'embedding-128k',
      async open(name) {
        if (name === 'model.safetensors') return weights;
        const t = text[name];
        if (t === undefined) return null;
        const bytes = new TextEncoder().encode(t);
        return { name, size: bytes.length, read: async (o, l) => bytes.slice(o, o + l), async *stream(o, l) { yield bytes.slice(o, o + l); } };
      },
    };
    const base = process.memoryUsage().arrayBuffers;
    let peak = base;
    let progressEvents = 0;
    const sample = () => {
      peak = Math.max(peak, process.memoryUsage().arrayBuffers);
    };
    const timer = setInterval(sample, 20);
    let engine;
    try {
      engine = await loadModel(files, { contextLength: 16, onProgress: () => { progressEvents++; sample(); } });
    } finally {
      clearInterval(timer);
    }
    sample();
    try {
      expect(progressEvents).toBeGreaterThan(10);
      const above = (peak - base) / MiB;
      console.log(`peak JS array buffers while loading: +${above.toFixed(1)} MiB (embedding ${(VOCAB * HIDDEN * 2) / MiB} MiB)`);
      expect(above).toBeLessThan(64);
    } finally {
      engine.unload();
    }
  }, 300_000);
});
