// How a model's vectors are made (ModelInfo.embedding), from its files and the load option:
//
// - A Hugging Face folder of a sentence-transformers model: modules.json lists the modules; its
//   Pooling module's config (1_Pooling/config.json) names the mode (pooling_mode_lasttoken,
//   pooling_mode_mean_tokens, pooling_mode_cls_token), and a Normalize module means L2-normalised
//   vectors. Other modes (max, mean_sqrt_len, weightedmean, several at once) and modules that change
//   the vector (Dense) leave the model without embeddings (a load notice says why; chat and
//   completions are unaffected), never replaced by a guess.
// - A GGUF file: `<arch>.pooling_type`, llama.cpp's enum (0 none, 1 mean, 2 cls, 3 last, 4 rank);
//   normalised, as llama.cpp's embeddings are by default (L2). 0 and absent: no pooling given;
//   4 (rank, a reranker's classifier head) and unknown numbers: no embeddings, as above.
// - Neither: a generative model; its vectors are the last token's hidden state, normalised.
//
// LoadOptions.embedding overrides the pooling and the normalisation (and gives embeddings to a
// model whose files name a pooling mode it does not run). Matryoshka truncation: config.json's
// `is_matryoshka` or `matryoshka_dimensions` (the sizes it was trained for), as vLLM reads them,
// or the option; otherwise false (Qwen3-Embedding says it in its model card only: give the option).
import { readJsonFile, type ModelFiles } from '../io/files.ts';
import type { GgufMetadata } from '../io/formats/gguf.ts';
import type { EmbeddingInfo, EmbeddingPooling } from './types.ts';

/** LoadOptions.embedding: what overrides the files. */
export interface EmbeddingOptions {
  pooling?: EmbeddingPooling;
  normalize?: boolean;
  /** The model is trained for Matryoshka truncation (requests' `dimensions` may ask for fewer). Default: what config.json says, else false. */
  matryoshka?: boolean;
}

/** Why a model's files give it no embeddings here (a load notice). */
class NoEmbeddingsError extends Error {}

const POOLINGS: readonly EmbeddingPooling[] = ['last', 'mean', 'cls'];

/** What a model's files say of its pooling; undefined: nothing. */
export interface FilePooling {
  pooling: EmbeddingPooling;
  normalize: boolean;
  source: 'sentence-transformers' | 'gguf';
}

/** The sentence-transformers Pooling config's modes this runtime pools with. */
const ST_MODES: Record<string, EmbeddingPooling | null> = {
  pooling_mode_lasttoken: 'last',
  pooling_mode_mean_tokens: 'mean',
  pooling_mode_cls_token: 'cls',
  pooling_mode_max_tokens: null,
  pooling_mode_mean_sqrt_len_tokens: null,
  pooling_mode_weightedmean_tokens: null,
};

const ST = 'sentence_transformers.models.';

/** A pooling mode the files give that this runtime does not pool with: LoadOptions.embedding.pooling may choose another. */
export class UnsupportedPoolingError extends Error {
  override name = 'UnsupportedPoolingError';
}

/**
 * The pooling of a sentence-transformers folder from modules.json and its Pooling module's
 * config (read by `readConfig`, given the module's path); undefined without modules.json or a
 * Pooling module. Throws for a mode it does not pool with, or a module after the transformer
 * that changes the vector (Dense, ...).
 */
export async function poolingFromSentenceTransformers(
  modules: unknown,
  readConfig: (path: string) => Promise<unknown>,
): Promise<FilePooling | undefined> {
  if (!Array.isArray(modules)) return undefined;
  let poolingPath: string | undefined;
  let normalize = false;
  for (const m of modules as unknown[]) {
    const type = typeof m === 'object' && m !== null ? (m as Record<string, unknown>).type : undefined;
    const path = typeof m === 'object' && m !== null ? (m as Record<string, unknown>).path : undefined;
    if (typeof type !== 'string') continue;
    const name = type.startsWith(ST) ? type.slice(ST.length) : type;
    if (name === 'Transformer' || name === 'models.Transformer') continue;
    if (name === 'Pooling') poolingPath = typeof path === 'string' ? path : '1_Pooling';
    else if (name === 'Normalize') normalize = true;
    else throw new NoEmbeddingsError(`modules.json has a ${type} module, which this runtime does not run: its vectors would differ from the model's`);
  }
  if (poolingPath === undefined) return undefined;
  const config = await readConfig(poolingPath);
  if (typeof config !== 'object' || config === null) throw new NoEmbeddingsError(`modules.json names a Pooling module, but ${poolingPath}/config.json is missing`);
  const on = Object.entries(config as Record<string, unknown>).filter(([key, value]) => key.startsWith('pooling_mode_') && value === true).map(([key]) => key);
  if (on.length !== 1) {
    throw new UnsupportedPoolingError(`${poolingPath}/config.json sets ${on.length === 0 ? 'no pooling mode' : `several pooling modes (${on.join(', ')})`}; give LoadOptions.embedding.pooling ('last', 'mean' or 'cls')`);
  }
  const pooling = ST_MODES[on[0]!];
  if (!pooling) throw new UnsupportedPoolingError(`${poolingPath}/config.json pools with ${on[0]}, which this runtime does not (it pools with the last token, the mean, or the first token); give LoadOptions.embedding.pooling to choose one`);
  return { pooling, normalize, source: 'sentence-transformers' };
}

/** llama.cpp's pooling types, by their number in `<arch>.pooling_type`. */
const GGUF_POOLING: Record<number, EmbeddingPooling | 'none' | 'rank'> = { 0: 'none', 1: 'mean', 2: 'cls', 3: 'last', 4: 'rank' };

/**
 * The pooling of a GGUF file (`<arch>.pooling_type`), normalised as llama.cpp's embeddings are;
 * undefined when absent or 0 (none: per-token vectors, which no request asks for). Throws for
 * rank (a reranker's classifier head) and unknown numbers.
 */
export function poolingFromGguf(metadata: GgufMetadata): FilePooling | undefined {
  const arch = metadata['general.architecture'];
  const value = metadata[`${String(arch)}.pooling_type`];
  if (value === undefined) return undefined;
  const kind = GGUF_POOLING[Number(value)];
  if (kind === undefined) throw new NoEmbeddingsError(`${String(arch)}.pooling_type is ${String(value)}, not one of llama.cpp's pooling types (0..4)`);
  if (kind === 'none') return undefined;
  if (kind === 'rank') throw new UnsupportedPoolingError(`${String(arch)}.pooling_type is 4 (rank): a reranker, whose scores come from a classifier head this runtime does not run; give LoadOptions.embedding.pooling to embed with it anyway`);
  return { pooling: kind, normalize: true, source: 'gguf' };
}

/** Checks LoadOptions.embedding before anything is read. */
export function checkEmbeddingOptions(options: EmbeddingOptions | undefined): void {
  if (options === undefined) return;
  if (typeof options !== 'object' || options === null) throw new Error(`embedding must be an object ({ pooling?, normalize?, matryoshka? }), got ${JSON.stringify(options)}`);
  if (options.pooling !== undefined && !POOLINGS.includes(options.pooling)) {
    throw new Error(`embedding.pooling must be one of ${POOLINGS.map((p) => `'${p}'`).join(', ')}, got ${JSON.stringify(options.pooling)}`);
  }
  for (const key of ['normalize', 'matryoshka'] as const) {
    if (options[key] !== undefined && typeof options[key] !== 'boolean') throw new Error(`embedding.${key} must be a boolean, got ${JSON.stringify(options[key])}`);
  }
}

/** config.json's Matryoshka fields (vLLM's): true, or the sizes the model was trained for; undefined: none. */
export function matryoshkaFromConfig(config: unknown): true | number[] | undefined {
  if (typeof config !== 'object' || config === null) return undefined;
  const { is_matryoshka: is, matryoshka_dimensions: dims } = config as Record<string, unknown>;
  if (Array.isArray(dims) && dims.length > 0 && dims.every((d) => Number.isInteger(d) && (d as number) > 0)) return [...(dims as number[])].sort((a, b) => a - b);
  return is === true ? true : undefined;
}

/**
 * ModelInfo.embedding of a model: its files' pooling (a GGUF's metadata, else a folder's
 * sentence-transformers modules and config.json's Matryoshka fields), the option over them.
 * Files whose pooling this runtime does not run give no embedding (unless the option names a
 * pooling, where that is enough) and a notice saying why.
 */
export async function readEmbeddingInfo(
  model: { files: ModelFiles; ggufMetadata?: GgufMetadata; hiddenSize: number },
  options: EmbeddingOptions = {},
): Promise<{ embedding?: EmbeddingInfo; notice?: string }> {
  checkEmbeddingOptions(options);
  let fromFiles: FilePooling | undefined;
  let matryoshka: true | number[] | undefined;
  try {
    if (model.ggufMetadata) fromFiles = poolingFromGguf(model.ggufMetadata);
    else if (model.files.ggufFile === undefined) {
      const modules = await readJsonFile(model.files, 'modules.json', { optional: true });
      fromFiles = await poolingFromSentenceTransformers(modules, (path) => readJsonFile(model.files, `${path.replace(/\/+$/, '')}/config.json`, { optional: true }));
      matryoshka = matryoshkaFromConfig(await readJsonFile(model.files, 'config.json', { optional: true }));
    }
  } catch (err) {
    const rescued = err instanceof UnsupportedPoolingError && options.pooling !== undefined;
    if (!rescued) {
      if (!(err instanceof NoEmbeddingsError || err instanceof UnsupportedPoolingError)) throw err;
      return { notice: `The model gives no embeddings here (/v1/embeddings answers 400): ${err.message}.` };
    }
  }
  const pooling = options.pooling ?? fromFiles?.pooling ?? 'last';
  const source = options.pooling !== undefined ? 'option' : (fromFiles?.source ?? 'generative');
  const sizes = Array.isArray(matryoshka) ? matryoshka.filter((d) => d <= model.hiddenSize) : undefined;
  return {
    embedding: {
      pooling,
      normalize: options.normalize ?? fromFiles?.normalize ?? true,
      dimensions: model.hiddenSize,
      matryoshka: options.matryoshka ?? matryoshka !== undefined,
      ...(options.matryoshka !== false && sizes && sizes.length > 0 ? { matryoshkaDimensions: sizes } : {}),
      source,
    },
  };
}
