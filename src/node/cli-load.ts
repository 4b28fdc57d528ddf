// How the CLI loads a model: what --model names (a path, an http(s) URL, or a Hugging Face repo
// as `hf:org/name`), the id it answers to, HF_TOKEN for the hub's gated repos, and Dawn.
import { basename, resolve } from 'node:path';
import { errorMessage } from '../api/errors.ts';
import type { ApiEngine } from '../api/handler.ts';
import type { ToolCallFormat } from '../api/tool-parsers.ts';
import { urlLayout } from '../io/files.ts';
import { DEFAULT_HUB_HOST, hubUrl, type HubSource } from '../io/hub.ts';
import type { WeightStorage } from '../model/weights.ts';
import { checkModelPath } from './files.ts';
import { loadDawn } from './gpu.ts';

/** What the CLI loads: the Engine's API, and its unload() when it has one (serve frees the GPU on exit). */
export type CliEngine = ApiEngine & { unload?(): Promise<void> };

/** The load options the CLI's flags set (each only when given). */
export interface CliLoadOptions {
  id?: string;
  weightStorage?: WeightStorage;
  /** --max-model-len: the context length (positions of the KV cache) the model is loaded with. */
  contextLength?: number;
  /** --max-num-seqs: sequences that decode at once (LoadOptions.maxConcurrentSequences). */
  maxConcurrentSequences?: number;
  /** The text of --chat-template's file. */
  chatTemplate?: string;
  toolCallFormat?: ToolCallFormat;
  /** --no-reasoning: false. */
  reasoning?: boolean;
  /** --no-prefix-cache: false. */
  prefixCache?: boolean;
  /** --prefix-cache-mib, in bytes. */
  prefixCacheBytes?: number;
  /** HF_TOKEN, for a model on the hub. */
  accessToken?: string;
  /** --pooling and --matryoshka (LoadOptions.embedding). */
  embedding?: { pooling?: 'last' | 'mean' | 'cls'; matryoshka?: boolean };
}

/** How the CLI loads a model: `model` is --model as given (default: the loader below). */
export type ModelLoader = (model: string, options: CliLoadOptions) => Promise<CliEngine>;

/** The environment variables the CLI reads. */
export type CliEnv = Readonly<Record<string, string | undefined>>;

/** A --model, resolved. */
export interface CliModelSource {
  /** What loadModel takes: a path, a URL, or a hub repo. */
  source: string | HubSource;
  /** Whether it is a path on this machine. */
  local: boolean;
  /** Whether its files come from the Hugging Face hub (huggingface.co, or $HF_ENDPOINT): HF_TOKEN goes there only. */
  hub: boolean;
  /** The id the model answers to without --id (as the loaders derive it). */
  defaultId: string;
}

// `org/name`, then `@revision`, then `/file.gguf` (a path inside the repo), each optional but the first.
const HF_REPO = /^([A-Za-z0-9][\w.-]*\/[A-Za-z0-9][\w.-]*)(?:@([^/\s]+))?(?:\/(\S+\.gguf))?$/i;

/** The hub's base URL, ending in `/`: $HF_ENDPOINT (a mirror) or huggingface.co. */
function hubBase(env: CliEnv): string {
  const host = env.HF_ENDPOINT?.trim() || DEFAULT_HUB_HOST;
  let url: URL;
  try {
    url = new URL(host);
  } catch {
    throw new Error(`HF_ENDPOINT is not a URL: '${host}'`);
  }
  return url.href.endsWith('/') ? url.href : `${url.href}/`;
}

/**
 * What `--model` names: `hf:org/name[@revision][/file.gguf]` is a Hugging Face repo (on
 * $HF_ENDPOINT when set); an http(s) URL is a URL, except that a repo's own page on the hub
 * (`https://huggingface.co/org/name`, `.../tree/REVISION`) is that repo; anything else is a path.
 */
export function parseModelSource(model: string, env: CliEnv = {}): CliModelSource {
  if (/^hf:/i.test(model)) {
    const m = HF_REPO.exec(model.slice(3));
    if (!m) throw new Error(`'${model}' is not a Hugging Face repo: use hf:org/name, hf:org/name@revision or hf:org/name/file.gguf`);
    return hubSource({ repo: m[1]!, ...(m[2] ? { revision: m[2] } : {}), ...(m[3] ? { file: m[3] } : {}) }, env);
  }
  if (/^https?:\/\//i.test(model)) {
    const base = hubBase(env);
    const onHub = model.startsWith(base);
    const page = onHub ? /^([^/?#]+\/[^/?#]+)(?:\/tree\/([^/?#]+))?\/?$/.exec(model.slice(base.length)) : null;
    if (page) {
      return hubSource({ repo: page[1]!, ...(page[2] ? { revision: decodeURIComponent(page[2]) } : {}) }, env);
    }
    return { source: model, local: false, hub: onHub, defaultId: urlLayout(model).id };
  }
  const full = resolve(model);
  return { source: model, local: true, hub: false, defaultId: basename(full).replace(/\.gguf$/i, '') };
}

function hubSource(repo: HubSource, env: CliEnv): CliModelSource {
  const source: HubSource = { ...repo, ...(env.HF_ENDPOINT?.trim() ? { host: hubBase(env) } : {}) };
  return { source, local: false, hub: true, defaultId: urlLayout(hubUrl(source)).id };
}

/** HF_TOKEN for a model on the hub (none for paths and other URLs: the token goes to the hub only). */
export function accessTokenFor(model: CliModelSource, env: CliEnv): string | undefined {
  const token = env.HF_TOKEN?.trim();
  return model.hub && token ? token : undefined;
}

/** A hint for a failed load from the hub that the server refused (401/403: a gated or private repo). */
export function loadFailureHint(model: CliModelSource, withToken: boolean, err: unknown): string {
  if (!model.hub || !/\bHTTP 40[13]\b/.test(errorMessage(err))) return '';
  return withToken
    ? ' (the repo may be gated: check that the HF_TOKEN token has read access to it and that its license is accepted on the hub)'
    : ' (the repo may be gated or private: set HF_TOKEN to a Hugging Face access token with access to it)';
}

/** The CLI's loader: src/node/load.ts on Dawn, for paths (checked first), URLs and hub repos. */
export function defaultLoader(env: CliEnv): ModelLoader {
  return async (model, options) => {
    const { source, local } = parseModelSource(model, env);
    // The path before Dawn and the GPU: a typo is reported at once, whatever the machine.
    if (local) await checkModelPath(source as string);
    await loadDawn();
    const node = await import('./load.ts');
    return local ? node.loadModelFromPath(source as string, options) : node.loadModel(source, options);
  };
}
