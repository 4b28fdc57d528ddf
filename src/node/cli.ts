// The `webgpu-llama` command (bin/webgpu-llama.mjs runs this file, from source or from dist/cli.js):
// `serve` (one model or several over HTTP), `chat` (a conversation in the terminal),
// `complete` (one completion to stdout) and `embed` (a JSON line of a vector per text). The flags
// are in cli-args.ts, model loading in cli-load.ts, the streams and hooks it is given in
// cli-io.ts, and the commands with state of their own in cli-serve.ts, cli-chat.ts and cli-embed.ts.
import { realpathSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { createCompletion, type CompletionChunk, type CompletionResponse } from '../api/completions.ts';
import { errorMessage } from '../api/errors.ts';
import { validateChatRequest } from '../api/chat-schema.ts';
import { validateCompletionRequest } from '../api/schema.ts';
import { TOOL_CALL_FORMATS, type ToolCallFormat } from '../api/tool-parsers.ts';
import { WEIGHT_STORAGES, type WeightStorage } from '../model/weights.ts';
import { given, maxModelLenOption, maxNumSeqsOption, numberOption, parseCommandLine, perModel, refuseFlags, SAMPLING_FLAGS, samplingParams, UsageError, type Values } from './cli-args.ts';
import { chat } from './cli-chat.ts';
import { embed, embedParams, embedTexts } from './cli-embed.ts';
import {
  accessTokenFor,
  defaultLoader,
  loadFailureHint,
  parseModelSource,
  type CliEngine,
  type CliEnv,
  type CliLoadOptions,
  type CliModelSource,
  type ModelLoader,
} from './cli-load.ts';
import { checkApiKey, normalizeAllowedHost, normalizeOrigin, type AccessOptions } from './access.ts';
import { serve, type ServedModel } from './cli-serve.ts';
import type { CliIo, CliOutput } from './cli-io.ts';

export { loadDawn } from './gpu.ts';
export { parseModelSource, type CliEngine, type CliLoadOptions, type ModelLoader } from './cli-load.ts';
export type { CliIo, CliOutput } from './cli-io.ts';

const SAMPLING_USAGE = `[--max-tokens N] [--temperature T] [--top-p P] [--seed S] [--stop TEXT]...
                  [--top-k K] [--min-p P] [--repetition-penalty R] [--presence-penalty P]
                  [--frequency-penalty F] [--logit-bias ID=BIAS]... [--ignore-eos] [--json BODY]`;

export const USAGE = `Usage:
  webgpu-llama serve --model PATH [--model PATH]... [--id NAME]... [--weight-storage TYPE]
                     [--max-model-len N] [--max-num-seqs N]
                     [--chat-template FILE]... [--tool-call-format FORMAT]...
                     [--no-reasoning] [--pooling MODE] [--matryoshka]
                     [--prefix-cache-mib N | --no-prefix-cache]
                     [--host HOST] [--port PORT] [--api-key KEY]...
                     [--allow-origin ORIGIN]... [--allow-host NAME]...
      Load the models and serve the OpenAI-style API over HTTP: POST /v1/chat/completions,
      POST /v1/completions, POST /v1/embeddings, GET /v1/models, and vLLM's POST /tokenize and
      POST /detokenize;
      GET /health answers 200 once the models are loaded, 503 before. Each request is answered
      by the model its "model" names. With several --model, give --id once per model, or not at
      all (each model's id comes from its file or folder name; two models cannot share an id).
      Defaults: --host 127.0.0.1 --port 8080. Ctrl-C (SIGINT) or SIGTERM stops it (exit code
      130 or 143). Whom it answers:
        --api-key KEY (repeatable, or $WEBGPU_LLAMA_API_KEY): every request but GET /health
          needs the header Authorization: Bearer KEY, else 401. Default: no key; listening on
          a --host other than loopback without one prints a warning.
        --allow-origin ORIGIN (repeatable): web pages of ORIGIN (scheme://host[:port]) may call
          the server too. Default: only pages of this machine (http(s)://localhost, 127.0.0.1,
          [::1], any port); a request from another page gets 403. '*' allows every origin (with
          a warning); programs that send no Origin are always answered.
        --allow-host NAME (repeatable): answer requests that name NAME in their Host header.
          Default: localhost, IP addresses and the --host name (against DNS rebinding); another
          name gets 403. '*' accepts any.
  webgpu-llama chat --model PATH [--system TEXT] [--chat-template FILE] [--id NAME]
                    [--weight-storage TYPE] [--max-model-len N]
                    [--prefix-cache-mib N | --no-prefix-cache] [--no-reasoning]
                  ${SAMPLING_USAGE}
      Chat with the model in the terminal. Each line read is a user message; the whole
      conversation goes to the model (POST /v1/chat/completions, streamed) and the reply is
      printed as it is generated. /reset clears the conversation (the --system prompt stays);
      /exit or the end of input (Ctrl-D) ends the chat: lines may be piped in. Ctrl-C stops a
      reply (the part shown stays in the conversation); at the prompt it ends the chat (exit
      code 130). An error of one turn (the conversation no longer fits the context) is
      printed and that turn dropped; one that every turn would hit (a model without a chat
      template, found before the first turn: give --chat-template) ends the chat with exit
      code 1. --max-tokens caps each
      reply (default: until the end of the turn). --json takes further
      /v1/chat/completions parameters (not messages, stream or n).
  webgpu-llama complete --model PATH --prompt TEXT|- [--id NAME] [--weight-storage TYPE]
                        [--max-model-len N]
                  ${SAMPLING_USAGE}
      Load the model, complete the prompt and print the completion to stdout as it is
      generated. --prompt - reads the prompt from stdin (less one trailing newline).
      Defaults: --max-tokens 16 --temperature 1 (0 = greedy) --top-p 1.
      --json takes any further /v1/completions parameters as a JSON object (e.g.
      '{"n": 2, "min_tokens": 4}'); it wins over the flags. With n > 1 the choices are printed
      one after another. '{"stream": false}' prints the completion once it is done; so does
      best_of > n (the best are known only at the end).
  webgpu-llama embed --model PATH [TEXT]... [--dimensions N] [--json BODY] [--id NAME]
                     [--weight-storage TYPE] [--max-model-len N] [--pooling MODE] [--matryoshka]
      Embed each TEXT, or else each line of stdin (blank lines left out), with the model
      (POST /v1/embeddings) and print one JSON line per text: {"index": i, "embedding": [...]},
      in order. --dimensions N keeps the first N components of each vector, renormalised
      (Matryoshka models only). --json takes further /v1/embeddings parameters (e.g.
      '{"truncate_prompt_tokens": 512}'); not model, input or encoding_format. Texts go to the
      model in batches of at most 2048 (a batch's errors name the input by its place in it).
  webgpu-llama --help
      Show this help.

PATH is a GGUF file or a Hugging Face model folder on disk (config.json, *.safetensors,
tokenizer.json), the http(s) URL of either, or a Hugging Face repo: hf:org/name,
hf:org/name@REVISION or hf:org/name/FILE.gguf (the repo's page URL,
https://huggingface.co/org/name, works too). Repos are read from $HF_ENDPOINT when it is set (a
mirror), else from huggingface.co. HF_TOKEN, when set, is sent as the access token
(Authorization: Bearer) for the files of models on the hub, and nowhere else: it opens gated and
private repos (Llama 3.2, ...).
--id is the name the model answers to in requests (default: derived from PATH).
--weight-storage f16|f32|source|q8_0|q4_0 sets how a Hugging Face model's weights are kept on the
GPU (default f16; GGUF files keep their types). --chat-template FILE is a Jinja chat template
used in place of the model's own (for a model that has none, or to change it).
--max-model-len N (vLLM's name) is the context length each model is loaded with: the positions its
KV cache holds, prompt and completion together (default: the model's own, at most 4096). GET
/v1/models shows it as max_model_len; a longer context costs more GPU memory (the KV cache).
--pooling last|mean|cls (serve, embed) is how a model's hidden states become its embedding (the
last token's, their mean, or the first token's), over what its files say (sentence-transformers'
modules.json, a GGUF's pooling_type; a model whose files say nothing: the last token).
--matryoshka (serve, embed) says the model was trained for shortened vectors, so requests may ask
for fewer 'dimensions' (config.json's is_matryoshka or matryoshka_dimensions say it too).
--max-num-seqs N (vLLM's name, serve) is how many sequences decode at once, each model: requests
(and the n choices of one) run together as rows of one batch, each in a KV cache of its own beside
the working one (default 8; 1: one request at a time, with no extra KV cache). More wait in turn.
--prefix-cache-mib N is the GPU memory (MiB, each model) for the K/V of earlier conversations kept
for reuse (the prefix cache: a request whose tokens begin with cached ones prefills only the rest;
the last request's K/V is reused in any case). Default: the KV cache's size. --no-prefix-cache
turns it off: every request prefills its whole prompt.
--tool-call-format hermes|llama3_json|mistral is how the model writes the tool calls that chat
completions return (default: what its chat template shows). In serve, --weight-storage and
--max-model-len apply to every model; --chat-template and --tool-call-format are given once
(every model) or once per --model, in the same order. A model that thinks (Qwen3, DeepSeek-R1
distills) has its thinking returned apart from its answer (chat's "reasoning"; the chat command
writes it to stderr); --no-reasoning leaves it in the answer, for every model. Numbers are plain
decimals (integers for --port, --max-tokens, --max-model-len, --seed, --top-k).
`;

const COMMANDS = ['serve', 'chat', 'complete', 'embed'] as const;
type Command = (typeof COMMANDS)[number];

/** Runs the CLI on `argv` (without node and script); resolves to the exit code. */
export async function runCli(argv: readonly string[], io: CliIo = {}): Promise<number> {
  const stdout = io.stdout ?? process.stdout;
  const stderr = io.stderr ?? process.stderr;
  const env = io.env ?? process.env;
  const loadModel = io.loadModel ?? defaultLoader(env);
  try {
    const { values, positionals } = parseCommandLine(argv);
    if (values.help) {
      stdout.write(USAGE);
      return 0;
    }
    const [command, ...extra] = positionals;
    if (!command) throw new UsageError('a command is required (serve, chat, complete or embed)');
    if (!(COMMANDS as readonly string[]).includes(command)) throw new UsageError(`unknown command '${command}'`);
    if (extra.length > 0 && command !== 'embed') throw new UsageError(`unexpected argument '${extra[0]}'`);
    checkFlagsOf(command as Command, values);
    const models = values.model ?? [];
    if (models.length === 0) throw new UsageError('--model PATH is required');
    const resolved = models.map((model) => {
      try {
        return parseModelSource(model, env);
      } catch (err) {
        throw new UsageError(errorMessage(err));
      }
    });
    const loadOptions = await modelLoadOptions(values, resolved, env);

    if (command === 'serve') {
      const port = numberOption('port', values.port, true) ?? 8080;
      if (port < 0 || port > 65535) throw new UsageError(`--port must be in 0..65535, got ${port}`);
      const served: ServedModel[] = models.map((model, i) => ({ model, resolved: resolved[i]!, options: loadOptions[i]! }));
      return await serve(loadModel, served, { host: values.host ?? '127.0.0.1', port, ...accessOptions(values, env) }, stdout, stderr, io);
    }

    if (command === 'chat') {
      const params = chatParams(values);
      const engine = await load(loadModel, models[0]!, resolved[0]!, loadOptions[0]!);
      try {
        return await chat(engine, { system: values.system, params }, { stdout, stderr, stdin: io.stdin, onInterrupt: io.onInterrupt });
      } finally {
        await engine.unload?.();
      }
    }

    if (command === 'embed') {
      const params = embedParams(values);
      const texts = await embedTexts(extra, io.stdin ?? process.stdin);
      if (texts.length === 0) throw new UsageError('no text to embed: give texts as arguments, or lines on stdin');
      const engine = await load(loadModel, models[0]!, resolved[0]!, loadOptions[0]!);
      try {
        return await embed(engine, texts, params, stdout);
      } finally {
        await engine.unload?.();
      }
    }

    if (values.prompt === undefined) throw new UsageError('--prompt TEXT is required (--prompt - reads it from stdin)');
    const prompt = values.prompt === '-' ? await readPrompt(io.stdin ?? process.stdin) : values.prompt;
    const request: Record<string, unknown> = { prompt, ...samplingParams(values) };
    if (given(request, 'stream') === undefined) request.stream = !wantsBestOf(request);
    // Checked before the load: a bad parameter should not wait for a multi-GB model. (The
    // model's own limits, the context length and vocabulary, are checked once it is loaded.)
    const { stream } = validateCompletionRequest({ ...request, model: 'placeholder' });
    const engine = await load(loadModel, models[0]!, resolved[0]!, loadOptions[0]!);
    return await complete(engine, request, stream, stdout);
  } catch (err) {
    stderr.write(`webgpu-llama: ${errorMessage(err)}\n`);
    if (err instanceof UsageError || (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      stderr.write(`Run 'webgpu-llama --help' for usage.\n`);
    }
    return 1;
  }
}

/** Refuses the flags that belong to other commands, and more than one model outside serve. */
function checkFlagsOf(command: Command, values: Values): void {
  const forServe = () => "for 'serve'";
  if (command !== 'embed') refuseFlags(values, ['dimensions'], command, () => "for 'embed'");
  if (command === 'serve') {
    refuseFlags(values, ['prompt'], command, () => "for 'complete'");
    refuseFlags(values, ['system'], command, () => "for 'chat'");
    refuseFlags(values, SAMPLING_FLAGS, command, () => "for 'complete' and 'chat'");
    return;
  }
  refuseFlags(values, ['host', 'port', 'allow-origin', 'allow-host', 'api-key', 'tool-call-format', 'max-num-seqs'], command, forServe);
  if (command !== 'embed') refuseFlags(values, ['pooling', 'matryoshka'], command, () => "for 'serve' and 'embed'");
  if (command === 'embed') {
    refuseFlags(values, ['prompt', 'system', 'chat-template', 'no-reasoning'], command, () => "for 'complete' and 'chat'");
    refuseFlags(values, SAMPLING_FLAGS.filter((flag) => flag !== 'json'), command, () => "for 'complete' and 'chat' (embed samples nothing)");
  } else if (command === 'complete') {
    refuseFlags(values, ['system'], command, () => "for 'chat'");
    refuseFlags(values, ['chat-template', 'no-reasoning'], command, () => "for 'serve' and 'chat' (complete sends no messages)");
  } else {
    refuseFlags(values, ['prompt'], command, () => "for 'complete' (chat reads its messages from stdin)");
  }
  for (const name of ['model', 'id', 'chat-template'] as const) {
    const count = values[name]?.length ?? 0;
    if (count > 1) throw new UsageError(`'${command}' takes one --${name} (serve takes several)`);
  }
}

/** The environment variable that gives serve an API key (besides --api-key). */
export const API_KEY_ENV = 'WEBGPU_LLAMA_API_KEY';

/** Whom serve answers: --allow-origin, --allow-host, and the keys of --api-key and $WEBGPU_LLAMA_API_KEY, each checked. */
function accessOptions(values: Values, env: CliEnv): AccessOptions {
  const checked = (flag: string, given: readonly string[] | undefined, check: (value: string) => string) =>
    (given ?? []).map((value) => {
      try {
        return check(value);
      } catch (err) {
        throw new UsageError(`${flag}: ${errorMessage(err)}`);
      }
    });
  const fromEnv = env[API_KEY_ENV]?.trim();
  return {
    allowedOrigins: checked('--allow-origin', values['allow-origin'], normalizeOrigin),
    allowedHosts: checked('--allow-host', values['allow-host'], normalizeAllowedHost),
    apiKeys: [...checked('--api-key', values['api-key'], checkApiKey), ...checked(API_KEY_ENV, fromEnv ? [fromEnv] : [], checkApiKey)],
  };
}

/** Each model's load options: --id, --weight-storage, --max-model-len, the --chat-template file's text, --tool-call-format, HF_TOKEN. */
async function modelLoadOptions(values: Values, models: readonly CliModelSource[], env: CliEnv): Promise<CliLoadOptions[]> {
  const count = models.length;
  const weightStorage = values['weight-storage'];
  if (weightStorage !== undefined && !(WEIGHT_STORAGES as readonly string[]).includes(weightStorage)) {
    throw new UsageError(`--weight-storage must be one of ${WEIGHT_STORAGES.join(', ')}, got '${weightStorage}'`);
  }
  for (const format of values['tool-call-format'] ?? []) {
    if (!(TOOL_CALL_FORMATS as readonly string[]).includes(format)) {
      throw new UsageError(`--tool-call-format must be one of ${TOOL_CALL_FORMATS.join(', ')}, got '${format}'`);
    }
  }
  const ids = values.id;
  if (ids !== undefined && ids.length !== count) {
    throw new UsageError(`--id is given ${ids.length} times for ${count} models: give one --id per --model, or none (ids from the file names)`);
  }
  const seen = new Map<string, number>();
  models.forEach((model, i) => {
    const id = ids?.[i] ?? model.defaultId;
    if (seen.has(id)) throw new UsageError(`two models would answer to '${id}' (--model ${seen.get(id)! + 1} and ${i + 1}): give each its own --id`);
    seen.set(id, i);
  });
  const templateFiles = perModel('chat-template', values['chat-template'], count);
  const texts = new Map<string, string>();
  for (const file of new Set(templateFiles)) {
    if (file === undefined) continue;
    try {
      texts.set(file, await readFile(file, 'utf8'));
    } catch (err) {
      throw new Error(`cannot read the --chat-template file: ${errorMessage(err)}`, { cause: err });
    }
  }
  const formats = perModel('tool-call-format', values['tool-call-format'], count);
  const prefixCache = prefixCacheOptions(values);
  const contextLength = maxModelLenOption(values['max-model-len']);
  const maxConcurrentSequences = maxNumSeqsOption(values['max-num-seqs']);
  const pooling = values.pooling;
  if (pooling !== undefined && !['last', 'mean', 'cls'].includes(pooling)) throw new UsageError(`--pooling must be one of last, mean, cls, got '${pooling}'`);
  const embedding = {
    ...(pooling === undefined ? {} : { pooling: pooling as 'last' | 'mean' | 'cls' }),
    ...(values.matryoshka ? { matryoshka: true } : {}),
  };
  return models.map((model, i) => {
    const accessToken = accessTokenFor(model, env);
    const chatTemplate = templateFiles[i] === undefined ? undefined : texts.get(templateFiles[i]!);
    return {
      ...(ids === undefined ? {} : { id: ids[i]! }),
      ...(weightStorage === undefined ? {} : { weightStorage: weightStorage as WeightStorage }),
      ...(contextLength === undefined ? {} : { contextLength }),
      ...(maxConcurrentSequences === undefined ? {} : { maxConcurrentSequences }),
      ...(chatTemplate === undefined ? {} : { chatTemplate }),
      ...(formats[i] === undefined ? {} : { toolCallFormat: formats[i] as ToolCallFormat }),
      ...(values['no-reasoning'] ? { reasoning: false } : {}),
      ...(Object.keys(embedding).length > 0 ? { embedding } : {}),
      ...prefixCache,
      ...(accessToken === undefined ? {} : { accessToken }),
    };
  });
}

/** --prefix-cache-mib N (bytes of saved prefixes, each model) and --no-prefix-cache. */
function prefixCacheOptions(values: Values): Pick<CliLoadOptions, 'prefixCache' | 'prefixCacheBytes'> {
  const mib = numberOption('prefix-cache-mib', values['prefix-cache-mib'], false);
  if (mib !== undefined && !(mib >= 0)) throw new UsageError(`--prefix-cache-mib must be >= 0, got '${values['prefix-cache-mib']}'`);
  if (values['no-prefix-cache'] && mib !== undefined) throw new UsageError('--no-prefix-cache and --prefix-cache-mib: give one');
  if (values['no-prefix-cache']) return { prefixCache: false };
  return mib === undefined ? {} : { prefixCacheBytes: Math.round(mib * 2 ** 20) };
}

/** Loads one model; a failure names it (and says what a 401 from the hub may mean). */
async function load(loadModel: ModelLoader, model: string, resolved: CliModelSource, options: CliLoadOptions): Promise<CliEngine> {
  try {
    return await loadModel(model, options);
  } catch (err) {
    throw new Error(`failed to load ${model}: ${errorMessage(err)}${loadFailureHint(resolved, options.accessToken !== undefined, err)}`, { cause: err });
  }
}

/** Chat's request parameters from the sampling flags and --json (the conversation and `stream` are chat's own). */
function chatParams(values: Values): Record<string, unknown> {
  const params = samplingParams(values, 'max_completion_tokens');
  for (const name of ['model', 'messages']) {
    if (given(params, name) !== undefined) throw new UsageError(`--json cannot set '${name}' for chat: it sends the conversation to the loaded model`);
  }
  const stream = given(params, 'stream');
  if (stream !== undefined && stream !== true) throw new UsageError("chat always streams: --json cannot set 'stream'");
  const n = given(params, 'n');
  if (n !== undefined && n !== null && n !== 1) throw new UsageError('chat shows one reply: --json cannot set n above 1');
  const tools = given(params, 'tools');
  if (tools !== undefined && tools !== null) throw new UsageError("the terminal chat shows text replies: --json cannot set 'tools' (serve answers tool calls over HTTP)");
  // Checked before the load, as complete's are (the context length is checked each turn).
  validateChatRequest({ ...params, model: 'placeholder', messages: [{ role: 'user', content: 'Hello' }], stream: true });
  return params;
}

/** All of stdin as text, less the one trailing newline that `echo` and heredocs add. */
async function readPrompt(stdin: AsyncIterable<string | Uint8Array>): Promise<string> {
  const decoder = new TextDecoder();
  let text = '';
  for await (const chunk of stdin) text += typeof chunk === 'string' ? chunk : decoder.decode(chunk, { stream: true });
  return (text + decoder.decode()).replace(/\r?\n$/, '');
}


/** best_of > n: the best choices are known only once all are done, so the CLI does not stream then. */
function wantsBestOf(request: Record<string, unknown>): boolean {
  const bestOf = given(request, 'best_of');
  const n = given(request, 'n') ?? 1;
  return typeof bestOf === 'number' && typeof n === 'number' && bestOf > n;
}

/**
 * Prints the completion: choice 0 as it streams, the others (n > 1, batches) once done, one after
 * another. If stdout's reader goes away (EPIPE: `| head`), the generation stops and the exit is a
 * quiet 0, as for any command in a pipe; another stdout error is reported.
 */
async function complete(engine: CliEngine, request: Record<string, unknown>, stream: boolean, stdout: CliOutput): Promise<number> {
  const controller = new AbortController();
  const output: { error: (Error & { code?: string }) | null } = { error: null };
  const onError = (err: Error) => {
    output.error ??= err;
    controller.abort(err);
  };
  stdout.on?.('error', onError);
  const write = (text: string) => {
    if (text && !output.error) stdout.write(text);
  };
  try {
    const body = { ...request, model: engine.generator.info.id };
    const later = new Map<number, string>();
    if (stream) {
      const chunks = (await createCompletion(engine.generator, body, { signal: controller.signal })) as AsyncIterable<CompletionChunk>;
      for await (const chunk of chunks) {
        for (const choice of chunk.choices) {
          if (choice.index === 0) write(choice.text);
          else later.set(choice.index, (later.get(choice.index) ?? '') + choice.text);
        }
      }
      write('\n');
    } else {
      const response = (await createCompletion(engine.generator, body, { signal: controller.signal })) as CompletionResponse;
      for (const choice of response.choices) later.set(choice.index, choice.text);
      write(`${later.get(0) ?? ''}\n`);
      later.delete(0);
    }
    for (const index of [...later.keys()].sort((a, b) => a - b)) write(`--- choice ${index}\n${later.get(index)}\n`);
  } catch (err) {
    if (!output.error) throw err; // else: the generation was aborted because stdout failed
  } finally {
    stdout.off?.('error', onError);
  }
  if (output.error && output.error.code !== 'EPIPE') throw new Error(`cannot write the completion: ${errorMessage(output.error)}`);
  return 0;
}

/** Whether `script` (process.argv[1]) is the module at `moduleUrl`, by its real path (links resolved). */
export function isMainScript(script: string | undefined, moduleUrl: string): boolean {
  if (script === undefined) return false;
  try {
    return realpathSync(script) === realpathSync(fileURLToPath(moduleUrl));
  } catch {
    return false;
  }
}

/**
 * Runs the CLI on process.argv and exits with its code. bin/webgpu-llama.mjs calls it; so does
 * this module when it is the program itself (`node dist/cli.js`, `bin/run-ts.mjs src/node/cli.ts`).
 */
export async function main(): Promise<void> {
  let running = true;
  // While runCli runs it handles stdout's errors itself; after it, a reader gone (EPIPE) as the
  // last line went out is no news, and another failure is reported as the exit.
  process.stdout.on('error', (err: Error & { code?: string }) => {
    if (running || err.code === 'EPIPE') return;
    process.stderr.write(`webgpu-llama: cannot write to stdout: ${errorMessage(err)}\n`);
    process.exit(1);
  });
  const code = await runCli(process.argv.slice(2));
  running = false;
  // The GPU device may hold the event loop open; the work is done once stdout is flushed.
  process.stdout.write('', () => process.exit(code));
}

if (isMainScript(process.argv[1], import.meta.url)) await main();
