// Where the CLI reads and writes, and what it is given instead of the process's own streams,
// signals and loader (tests give their own). runCli (cli.ts) takes a CliIo; the commands in
// cli-chat.ts and cli-serve.ts write to its CliOutput.
import type { CliEnv, ModelLoader } from './cli-load.ts';
import type { RunningServer } from './http.ts';

/** Where the CLI writes. A stream's `error` events (EPIPE: the reader has gone) stop `complete` and `chat`. */
export interface CliOutput {
  write(text: string): unknown;
  on?(event: 'error', listener: (err: Error) => void): unknown;
  off?(event: 'error', listener: (err: Error) => void): unknown;
}

export interface CliIo {
  /** How a model is loaded (default: src/node/load.ts on Dawn, see cli-load.ts). */
  loadModel?: ModelLoader;
  stdout?: CliOutput;
  stderr?: { write(text: string): unknown };
  /** Read for `--prompt -`, and for chat's lines (default: process.stdin; a terminal gets line editing). */
  stdin?: AsyncIterable<string | Uint8Array>;
  /** The environment: HF_TOKEN, HF_ENDPOINT (default: process.env). */
  env?: CliEnv;
  /**
   * Stops `serve` (default: SIGINT / SIGTERM). An abort whose reason is a signal's name
   * ('SIGINT') exits as that signal does (130); any other reason exits 0.
   */
  signal?: AbortSignal;
  /** Told the server once it listens (tests). */
  onListening?: (server: RunningServer) => void;
  /** Subscribes to chat's Ctrl-C; returns the unsubscribe (default: SIGINT, and readline's on a terminal). */
  onInterrupt?: (listener: () => void) => () => void;
}
