// What a visitor types in the model box, as a loadModel source: a Hugging Face repo id
// ("org/name", "org/name@revision", "org/name/file.gguf") or a URL (absolute, or a path on this
// site starting with "/" or "./"). Repo ids resolve on huggingface.co, or on a mirror's host.
import type { HubSource, ModelSource } from '../src/index.ts';

export interface ParsedSource {
  source: ModelSource;
  /** How the page names it while it loads. */
  label: string;
}

const REPO = /^([A-Za-z0-9][\w.-]*\/[A-Za-z0-9][\w.-]*)(?:@([^/\s]+))?(?:\/(\S+\.gguf))?$/i;

export interface SourceContext {
  /** What relative URLs resolve against; default the page. */
  base?: string;
  /** A Hugging Face mirror (the page's `?hub=`); default huggingface.co. */
  hubHost?: string;
}

export function parseModelSource(text: string, { base = location.href, hubHost }: SourceContext = {}): ParsedSource {
  const value = text.trim();
  if (value === '') throw new Error('Enter a Hugging Face repo id (org/name) or the URL of a model folder or .gguf file.');
  if (/^[a-z][a-z\d+.-]*:\/\//i.test(value) || /^\.{0,2}\//.test(value)) {
    const url = new URL(value, base).href;
    return { source: url, label: url };
  }
  const repo = REPO.exec(value);
  if (!repo) {
    throw new Error(`"${value}" is neither a Hugging Face repo id (org/name, org/name@revision, org/name/file.gguf) nor a URL (https://…, /path, ./path).`);
  }
  const source: HubSource = { repo: repo[1]! };
  if (repo[2]) source.revision = repo[2];
  if (repo[3]) source.file = repo[3];
  if (hubHost) source.host = hubHost;
  return { source, label: `${value} (Hugging Face)` };
}
