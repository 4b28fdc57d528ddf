// `webgpu-llama embed`: the texts given as arguments, or stdin's lines, through POST
// /v1/embeddings' own code (createEmbeddings), one JSON line per text on stdout:
// {"index": i, "embedding": [...]}. The texts go in batches of at most MAX_EMBEDDING_INPUTS;
// `index` counts across them.
import { createEmbeddings, EMBEDDING_PARAMS, MAX_EMBEDDING_INPUTS } from '../api/embeddings.ts';
import { errorMessage } from '../api/errors.ts';
import { validateParams } from '../api/params.ts';
import { given, numberOption, samplingParams, UsageError, type Values } from './cli-args.ts';
import type { CliOutput } from './cli-io.ts';
import type { CliEngine } from './cli-load.ts';

/** The request parameters of --dimensions and --json (no model, input or encoding_format: embed sets them), checked before the load. */
export function embedParams(values: Values): Record<string, unknown> {
  const params = samplingParams(values);
  for (const name of ['model', 'input', 'encoding_format']) {
    if (given(params, name) !== undefined) throw new UsageError(`--json cannot set '${name}' for embed: it embeds the texts given, as floats, with the loaded model`);
  }
  const dimensions = numberOption('dimensions', values.dimensions, true);
  if (dimensions !== undefined) params.dimensions = dimensions;
  validateParams(EMBEDDING_PARAMS, { ...params, model: 'placeholder', input: 'placeholder' });
  return params;
}

/** The texts to embed: the arguments, or else stdin's lines (blank lines left out; a trailing \r dropped). */
export async function embedTexts(args: readonly string[], stdin: AsyncIterable<string | Uint8Array>): Promise<string[]> {
  if (args.length > 0) return [...args];
  const decoder = new TextDecoder();
  let text = '';
  for await (const chunk of stdin) text += typeof chunk === 'string' ? chunk : decoder.decode(chunk, { stream: true });
  text += decoder.decode();
  return text.split('\n').map((line) => line.replace(/\r$/, '')).filter((line) => line.trim() !== '');
}

/**
 * Embeds `texts` and prints a JSON line per text. A failed batch ends the command (the lines of
 * earlier batches are out already). A reader gone from stdout (EPIPE) ends it quietly, exit 0.
 */
export async function embed(engine: CliEngine, texts: readonly string[], params: Record<string, unknown>, stdout: CliOutput): Promise<number> {
  if (texts.length === 0) throw new UsageError('no text to embed: give texts as arguments, or lines on stdin');
  let failure: (Error & { code?: string }) | null = null;
  const onError = (err: Error) => void (failure ??= err);
  stdout.on?.('error', onError);
  try {
    for (let start = 0; start < texts.length && !failure; start += MAX_EMBEDDING_INPUTS) {
      const input = texts.slice(start, start + MAX_EMBEDDING_INPUTS);
      const response = await createEmbeddings(engine.generator, { ...params, model: engine.generator.info.id, input, encoding_format: 'float' });
      for (const item of response.data) {
        if (failure) break;
        stdout.write(`${JSON.stringify({ index: start + item.index, embedding: item.embedding })}\n`);
      }
    }
  } finally {
    stdout.off?.('error', onError);
  }
  const error = failure as (Error & { code?: string }) | null;
  if (error && error.code !== 'EPIPE') throw new Error(`cannot write the embeddings: ${errorMessage(error)}`);
  return 0;
}
