// Hugging Face repo ids as a model source: `{ repo: 'HuggingFaceTB/SmolLM2-135M' }` is the folder
// at `{host}/{repo}/resolve/{revision}/`, and `{ repo, file: 'x.gguf' }` one GGUF file in it.
// The host is configurable for mirrors (and for tests, which point it at a local server).
import { filesFromUrl, type ModelFiles, type UrlFetchOptions } from './files.ts';

export const DEFAULT_HUB_HOST = 'https://huggingface.co';

/** A model in a Hugging Face repository (or a mirror that serves the same `resolve` URLs). */
export interface HubSource {
  /** `org/name` (or a legacy single-name repo). */
  repo: string;
  /** A branch, tag or commit; default `main`. Pin a commit for a cache that never goes stale. */
  revision?: string;
  /** A `.gguf` file inside the repo; default: the repo is a Hugging Face model folder (config.json, ...). */
  file?: string;
  /** Default `https://huggingface.co`. */
  host?: string;
}

const REPO_ID = /^[A-Za-z0-9][\w.-]*(\/[A-Za-z0-9][\w.-]*)?$/;

export function isHubSource(source: unknown): source is HubSource {
  return typeof source === 'object' && source !== null && typeof (source as HubSource).repo === 'string' && typeof (source as { open?: unknown }).open !== 'function';
}

/** The URL of a hub source: the repo folder's (ending in `/`) or, with `file`, the file's. */
export function hubUrl(source: HubSource): string {
  const { repo, revision = 'main', file, host = DEFAULT_HUB_HOST } = source;
  if (!REPO_ID.test(repo) || repo.includes('..')) {
    throw new Error(`Not a Hugging Face repo id: ${JSON.stringify(repo)} (expected "org/name")`);
  }
  if (!revision) throw new Error('The revision must not be empty');
  if (file !== undefined && !/\.gguf$/i.test(file)) {
    throw new Error(`file must name a .gguf file inside the repo, got ${JSON.stringify(file)}; leave it out to load the repo's Hugging Face folder`);
  }
  let base: URL;
  try {
    base = new URL(host);
  } catch {
    throw new Error(`Not a valid hub host: ${host}`);
  }
  const prefix = base.href.endsWith('/') ? base.href : `${base.href}/`;
  // A revision such as refs/pr/1 is one path segment on the hub: encoded whole.
  const folder = `${prefix}${repo}/resolve/${encodeURIComponent(revision)}/`;
  if (file === undefined) return folder;
  return folder + file.split('/').filter(Boolean).map(encodeURIComponent).join('/');
}

/**
 * The files of a hub source, read with HTTP Range requests; `options.accessToken` (a Hugging Face
 * token) opens gated and private repos.
 */
export function filesFromHub(source: HubSource, fetchImpl?: typeof fetch, options: UrlFetchOptions = {}): ModelFiles {
  return filesFromUrl(hubUrl(source), fetchImpl, options);
}
