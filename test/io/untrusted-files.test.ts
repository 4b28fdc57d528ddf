// Model files and servers that are broken or hostile: every one is refused with an error that names
// the file, key or tensor, before anything large is allocated or any other host is asked.
import { describe, expect, it } from 'vitest';
import { filesFromMemory, filesFromUrl, memorySource, type ByteSource, type ModelFiles } from '../../src/io/files.ts';
import { readGgufHeader } from '../../src/io/formats/gguf.ts';
import { readSafetensorsCheckpoint, readSafetensorsHeader } from '../../src/io/formats/safetensors.ts';
import type { LlamaConfig } from '../../src/model/config.ts';
import { openModel } from '../../src/engine/open-model.ts';
import { checkTensors, type ModelTensor } from '../../src/model/weights.ts';
import { buildGguf, buildSafetensors, readBytes, STORIES_HF, tinyLlamaGgufKvs } from '../helpers/model-files.ts';

const hfNames = ['config.json', 'tokenizer.json', 'tokenizer_config.json', 'generation_config.json', 'model.safetensors'];
const hfFiles = Object.fromEntries(hfNames.map((n) => [n, readBytes(`${STORIES_HF}/${n}`)]));

/**
 * A fetch over files at https://example.com/m/ that honours HEAD and Range; a missing file is
 * answered with `missing` (404, S3's 403, or an SPA's HTML page). Every URL asked is recorded.
 */
function server(files: Record<string, Uint8Array>, missing: 404 | 403 | 'html' = 404) {
  const urls: string[] = [];
  const fetchImpl = (async (input: RequestInfo | URL, init?: RequestInit) => {
    const url = String(input);
    urls.push(url);
    const path = new URL(url).pathname;
    const bytes = path.startsWith('/m/') ? files[decodeURIComponent(path.slice(3))] : undefined;
    if (!bytes) {
      if (missing === 'html') return new Response('<!doctype html><title>app</title>', { status: 200, headers: { 'content-type': 'text/html' } });
      return new Response(missing === 403 ? 'AccessDenied' : 'not found', { status: missing, statusText: missing === 403 ? 'Forbidden' : 'Not Found' });
    }
    if (init?.method === 'HEAD') return new Response(null, { status: 200, headers: { 'content-length': String(bytes.length) } });
    const m = new Headers(init?.headers).get('range')?.match(/bytes=(\d+)-(\d+)/);
    if (!m) return new Response(bytes.slice(), { status: 200 });
    const end = Math.min(Number(m[2]), bytes.length - 1);
    return new Response(bytes.slice(Number(m[1]), end + 1), { status: 206, headers: { 'content-range': `bytes ${m[1]}-${end}/${bytes.length}` } });
  }) as typeof fetch;
  return { fetchImpl, urls };
}

describe('model.safetensors.index.json shard names', () => {
  const shard = buildSafetensors([{ name: 'a.weight', dtype: 'F32', shape: [1], data: new Uint8Array(4) }]);
  const indexWith = (file: unknown) => JSON.stringify({ weight_map: { 'a.weight': file } });

  for (const bad of [
    '//evil.example/x.safetensors',
    '../../../../orgB/repoB/resolve/main/x.safetensors',
    'sub/../../x.safetensors',
    '/x.safetensors',
    'a\\..\\x.safetensors',
    'C:x.safetensors',
    'https://evil.example/x.safetensors',
    'sub//x.safetensors',
    '',
    42,
    null,
    ['x.safetensors'],
  ]) {
    it(`refuses ${JSON.stringify(bad)} before asking for any file`, async () => {
      const { fetchImpl, urls } = server({ 'model.safetensors.index.json': new TextEncoder().encode(indexWith(bad)), 'x.safetensors': shard });
      const error = await readSafetensorsCheckpoint(filesFromUrl('https://example.com/m/', fetchImpl)).catch((e: Error) => e);
      expect(error).toBeInstanceOf(Error);
      expect(error).not.toBeInstanceOf(TypeError);
      expect((error as Error).message).toContain('model.safetensors.index.json');
      expect((error as Error).message).toContain('weight_map["a.weight"]');
      expect(urls.every((u) => u.startsWith('https://example.com/m/model.safetensors.index.json'))).toBe(true);
    });
  }

  it('reads a shard in a subfolder of the model', async () => {
    const files = filesFromMemory('m', { 'model.safetensors.index.json': indexWith('shards/x.safetensors'), 'shards/x.safetensors': shard });
    expect((await readSafetensorsCheckpoint(files)).map((t) => t.file)).toEqual(['shards/x.safetensors']);
  });
});

describe('URL sources', () => {
  it('an optional file answered with 403 (S3 without ListBucket) is absent; a needed one is an error naming it', async () => {
    const s3 = server(hfFiles, 403);
    const model = await openModel(filesFromUrl('https://example.com/m/', s3.fetchImpl));
    expect(model.format).toBe('safetensors');
    expect(s3.urls.some((u) => u.endsWith('/model.safetensors.index.json'))).toBe(true);
    const { 'tokenizer.json': _, ...noTokenizer } = hfFiles;
    await expect(openModel(filesFromUrl('https://example.com/m/', server(noTokenizer, 403).fetchImpl))).rejects.toThrow(/tokenizer\.json: HTTP 403 Forbidden/);
  });

  it('a server without Range support or Content-Length is read only up to 64 MiB', async () => {
    let pulled = 0;
    const fetchImpl = (async (_url: RequestInfo | URL, init?: RequestInit) => {
      if (init?.method === 'HEAD') return new Response(null, { status: 405 });
      // 1 GiB, made as it is read, with no Content-Length.
      const body = new ReadableStream<Uint8Array>({
        pull(controller) {
          if (pulled >= 1 << 30) return controller.close();
          pulled += 1 << 20;
          controller.enqueue(new Uint8Array(1 << 20));
        },
      });
      return new Response(body, { status: 200 });
    }) as typeof fetch;
    await expect(filesFromUrl('https://example.com/m/', fetchImpl).open('model.safetensors')).rejects.toThrow(
      /model\.safetensors: the server does not support HTTP Range requests/,
    );
    expect(pulled).toBeLessThanOrEqual((64 << 20) + (4 << 20));
  });

  it('a model URL with malformed percent-encoding is not a valid model URL', () => {
    expect(() => filesFromUrl('https://example.com/models/%zz.gguf')).toThrow(/Not a valid model URL: .*%zz\.gguf/);
    expect(() => filesFromUrl('https://example.com/models/%E0%A4%A/')).toThrow(/Not a valid model URL/);
  });

  it("a Hub '/blob/' URL (a web page) is named, with '/resolve/' to use; an HTML page for a weights file is not 'missing'", async () => {
    const html = server({}, 'html').fetchImpl;
    await expect(openModel(filesFromUrl('https://huggingface.co/org/repo/blob/main/x.gguf', html))).rejects.toThrow(/x\.gguf: .*'\/resolve\/'.*'\/blob\/'/);
    await expect(openModel(filesFromUrl('https://huggingface.co/org/repo/tree/main', html))).rejects.toThrow(/config\.json: .*'\/resolve\/'.*'\/tree\/'/);
    await expect(openModel(filesFromUrl('https://example.com/m/x.gguf', html))).rejects.toThrow(/x\.gguf: the server answered .* with an HTML page/);
    // Other files answered with HTML stay a dev server's SPA fallback for a missing file.
    expect(await filesFromUrl('https://example.com/m/', html).open('generation_config.json')).toBeNull();
  });
});

/** GGUF bytes written field by field: the writer cannot make broken files. */
class RawGguf {
  private out: number[] = [];
  u32(v: number) { const b = new Uint8Array(4); new DataView(b.buffer).setUint32(0, v, true); this.out.push(...b); return this; }
  u32be(v: number) { const b = new Uint8Array(4); new DataView(b.buffer).setUint32(0, v, false); this.out.push(...b); return this; }
  u64(v: number | bigint) { const b = new Uint8Array(8); new DataView(b.buffer).setBigUint64(0, BigInt(v), true); this.out.push(...b); return this; }
  str(s: string) { const b = new TextEncoder().encode(s); this.u64(b.length); this.out.push(...b); return this; }
  /** Magic, version 3, counts. */
  header(tensors: number, kvs: number) { this.out.push(...new TextEncoder().encode('GGUF')); return this.u32(3).u64(tensors).u64(kvs); }
  pad(n: number) { this.out.push(...new Uint8Array(n)); return this; }
  bytes() { return new Uint8Array(this.out); }
}

const STRING = 8;
const ARRAY = 9;
const U64 = 10;

describe('GGUF header of a broken or hostile file', () => {
  const read = (bytes: Uint8Array) => readGgufHeader(memorySource('x.gguf', bytes));

  it('names a big-endian file', async () => {
    const bytes = new Uint8Array([...new TextEncoder().encode('GGUF'), ...new RawGguf().u32be(3).u64(0).u64(0).bytes()]);
    await expect(read(bytes)).rejects.toThrow(/x\.gguf is a big-endian GGUF file \(version 3\)/);
    await expect(read(new RawGguf().header(0, 0).bytes().map((b, i) => (i === 4 ? 9 : b)))).rejects.toThrow(/GGUF version 9 is not supported/);
  });

  it('checks array and string lengths against the bytes left in the file, naming the key', async () => {
    const tokens = new RawGguf().header(0, 1).str('tokenizer.ggml.tokens').u32(ARRAY).u32(STRING).u64(2 ** 40).pad(64).bytes();
    await expect(read(tokens)).rejects.toThrow(/key tokenizer\.ggml\.tokens has an array of 1099511627776 items/);
    const scores = new RawGguf().header(0, 1).str('tokenizer.ggml.scores').u32(ARRAY).u32(6).u64(17).pad(64).bytes();
    await expect(read(scores)).rejects.toThrow(/key tokenizer\.ggml\.scores has an array of 17 items/);
    const name = new RawGguf().header(0, 1).str('general.name').u32(STRING).u64(2 ** 40).pad(64).bytes();
    await expect(read(name)).rejects.toThrow(/GGUF general\.name has a length of 1099511627776 bytes/);
    const item = new RawGguf().header(0, 1).str('tokenizer.ggml.merges').u32(ARRAY).u32(STRING).u64(2).str('a b').u64(1 << 20).pad(64).bytes();
    await expect(read(item)).rejects.toThrow(/GGUF tokenizer\.ggml\.merges\[1\] has a length of 1048576 bytes/);
    // Within the file but over 64 MiB: still not a string to allocate.
    const big = new RawGguf().header(0, 1).str('general.name').u32(STRING).u64(65 << 20).bytes();
    const padded = new Uint8Array(big.length + (65 << 20));
    padded.set(big);
    await expect(read(padded)).rejects.toThrow(/general\.name has a length of 68157440 bytes/);
    await expect(read(new RawGguf().header(2 ** 40, 0).pad(64).bytes())).rejects.toThrow(/tensor count 1099511627776/);
  });

  it('requires general.alignment to be an integer-typed power of two of sane size', async () => {
    const withAlignment = (type: number, write: (r: RawGguf) => RawGguf) => write(new RawGguf().header(0, 1).str('general.alignment').u32(type)).pad(64).bytes();
    await expect(read(withAlignment(U64, (r) => r.u64(3 * 2 ** 32)))).rejects.toThrow(/invalid general\.alignment 12884901888/);
    await expect(read(withAlignment(STRING, (r) => r.str('32')))).rejects.toThrow(/invalid general\.alignment "32"/);
    await expect(read(withAlignment(6, (r) => r.u32(0x42000000)))).rejects.toThrow(/invalid general\.alignment 32/); // f32 32.0
    await expect(read(withAlignment(4, (r) => r.u32(2 ** 30)))).rejects.toThrow(/invalid general\.alignment 1073741824/);
    await expect(read(withAlignment(4, (r) => r.u32(48)))).rejects.toThrow(/invalid general\.alignment 48/);
    expect((await read(withAlignment(U64, (r) => r.u64(64)))).alignment).toBe(64);
  });

  it('refuses a metadata key or a tensor name given twice; a __proto__ key is only a key', async () => {
    const twice = new RawGguf().header(0, 2).str('general.name').u32(STRING).str('a').str('general.name').u32(STRING).str('b').bytes();
    await expect(read(twice)).rejects.toThrow(/GGUF metadata key general\.name appears twice/);
    const proto = new RawGguf().header(0, 1).str('__proto__').u32(STRING).str('x').bytes();
    const header = await read(proto);
    expect(Object.hasOwn(header.metadata, '__proto__')).toBe(true);
    expect(header.metadata.__proto__).toBe('x');
    const arch = { 'general.architecture': { type: 'string', value: 'llama' } } as const;
    const tensor = { name: 'output_norm.weight', ne: [2], ggmlType: 0, data: new Uint8Array(8) };
    await expect(read(buildGguf(arch, [tensor, tensor]))).rejects.toThrow(/GGUF tensor output_norm\.weight appears twice/);
  });
});

describe('safetensors header of a broken or hostile file', () => {
  /** A safetensors file with this header text and `data` bytes of data. */
  const file = (header: string, data = 64) => {
    const text = new TextEncoder().encode(header);
    const out = new Uint8Array(8 + text.length + data);
    new DataView(out.buffer).setBigUint64(0, BigInt(text.length), true);
    out.set(text, 8);
    return memorySource('model.safetensors', out);
  };

  it('refuses a tensor given twice', async () => {
    const header = '{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "v": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},\n "w" : {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}';
    await expect(readSafetensorsHeader(file(header))).rejects.toThrow(/model\.safetensors: the safetensors header lists tensor w twice/);
    // Keys of nested objects, and strings that look like keys, are not tensors.
    const nested = '{"__metadata__": {"w": "1", "format": "w"}, "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a\\"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}';
    expect((await readSafetensorsHeader(file(nested))).tensors.map((t) => t.name)).toEqual(['w', 'a"w']);
  });

  it('requires non-negative integer dims and offsets, end >= begin for any dtype', async () => {
    const entry = (e: string) => readSafetensorsHeader(file(`{"w": ${e}}`));
    await expect(entry('{"dtype": "U8", "shape": [1.5, 2], "data_offsets": [0, 3]}')).rejects.toThrow(/tensor w has shape \[1\.5,2\]/);
    await expect(entry('{"dtype": "U8", "shape": [-2, -2], "data_offsets": [0, 4]}')).rejects.toThrow(/tensor w has shape/);
    await expect(entry('{"dtype": "U8", "shape": ["4"], "data_offsets": [0, 4]}')).rejects.toThrow(/tensor w has shape/);
    await expect(entry('{"dtype": "U8", "shape": [2], "data_offsets": [0.5, 2.5]}')).rejects.toThrow(/tensor w has data_offsets \[0\.5,2\.5\]/);
    await expect(entry('{"dtype": "F8_E8M0", "shape": [4], "data_offsets": [8, 4]}')).rejects.toThrow(/tensor w has data_offsets \[8,4\].*end >= begin/);
    await expect(entry('{"dtype": "F8_E8M0", "shape": [4], "data_offsets": [-4, 0]}')).rejects.toThrow(/tensor w has data_offsets/);
    await expect(entry('{"dtype": "U8", "shape": [4], "data_offsets": [0, 4, 8]}')).rejects.toThrow(/tensor w has data_offsets/);
  });

  it('keeps a __proto__ metadata key as a key', async () => {
    const header = await readSafetensorsHeader(file('{"__metadata__": {"__proto__": "x", "format": "pt"}}'));
    expect(Object.getPrototypeOf(header.metadata)).toBe(null);
    expect(header.metadata.format).toBe('pt');
    expect(header.metadata.__proto__).toBe('x');
  });
});

const tinyConfig: LlamaConfig = {
  architecture: 'llama', vocabSize: 8, hiddenSize: 8, intermediateSize: 16, numLayers: 1, numHeads: 2, numKvHeads: 2, headDim: 4,
  contextLength: 16, rmsNormEps: 1e-5, ropeTheta: 10000, ropePairing: 'adjacent', tieWordEmbeddings: true, attentionBias: false,
};

describe('layer counts and tensors the header gives', () => {
  it('a huge layer count fails before a list of its tensors is built', () => {
    const tensors = new Map<string, ModelTensor>([['model.norm.weight', { name: 'model.norm.weight', sourceName: 'output_norm.weight', shape: [8], dtype: 'f32', file: 'x', offset: 0, byteLength: 32 }]]);
    for (const numLayers of [1e9, 2 ** 40]) {
      expect(() => checkTensors({ ...tinyConfig, numLayers }, tensors)).toThrow(/The model has 1 tensors, fewer than the \d+ that \d+ layers need/);
    }
    // Checked without building the list: a count no Array could hold.
    expect(() => checkTensors({ ...tinyConfig, numLayers: 2 ** 33 }, tensors)).toThrow(/layer count/);
  });

  it('GGUF block_count 2^40 and config.json num_hidden_layers 1e9 fail with the layer count named', async () => {
    const kvs = { ...tinyLlamaGgufKvs(tinyConfig), 'llama.block_count': { type: 'f32', value: 2 ** 40 } } as const;
    const gguf = buildGguf(kvs, [{ name: 'output_norm.weight', ne: [8], ggmlType: 0, data: new Uint8Array(32) }]);
    await expect(openModel(filesFromMemory('m', { 'm.gguf': gguf }, 'm.gguf'))).rejects.toThrow(/1099511627776 layers need.*block_count/);
    const config = { ...JSON.parse(new TextDecoder().decode(hfFiles['config.json'])), num_hidden_layers: 1e9 };
    await expect(openModel(filesFromMemory('m', { ...hfFiles, 'config.json': JSON.stringify(config) }))).rejects.toThrow(/1000000000 layers need.*num_hidden_layers/);
  });

  it("rope_freqs.weight's length is checked from the header, before its bytes are read", async () => {
    const n = 1 << 21; // 8 MiB: more than the header reader's 1 MiB chunks
    const gguf = buildGguf(tinyLlamaGgufKvs(tinyConfig), [{ name: 'rope_freqs.weight', ne: [n], ggmlType: 0, data: new Uint8Array(4 * n) }]);
    const base = memorySource('m.gguf', gguf);
    const reads: number[] = [];
    const source: ByteSource = { ...base, read: (offset, length) => (reads.push(length), base.read(offset, length)) };
    const files: ModelFiles = { id: 'm', ggufFile: 'm.gguf', open: async (name) => (name === 'm.gguf' ? source : null) };
    await expect(openModel(files)).rejects.toThrow(/rope_freqs\.weight has 2097152 values; head size 4 needs 2/);
    expect(reads.every((length) => length < 4 * n)).toBe(true);
  });
});
