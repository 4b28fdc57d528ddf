// Random models that a test file generates into temporary folders (scripts/model-families.ts,
// scripts/gguf-from-hf.ts) and loads: the folders are removed and the engines unloaded after the
// file's tests. The weights of such a model read back for the CPU reference are in cpu-weights.ts
// (re-exported here), which the Playwright specs import too.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import type { Engine } from '../../src/api/engine.ts';
import type { LlamaGenerator } from '../../src/engine/generator.ts';
import { loadModelFromPath, type LoadModelOptions } from '../../src/node/index.ts';

export interface TempModels {
  /** A fresh empty folder, removed after the file's tests. */
  dir(prefix: string): string;
  /** Loads a model folder or GGUF file on the process's GPU; unloaded after the file's tests. */
  load(path: string, options?: LoadModelOptions): Promise<LlamaGenerator>;
}

/** Temporary folders and engines for one test file; call it at the top level of the file (it registers an afterAll). */
export function tempModels(): TempModels {
  const dirs: string[] = [];
  const engines: Engine[] = [];
  afterAll(async () => {
    await Promise.all(engines.map((e) => e.unload()));
    dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
  });
  return {
    dir(prefix) {
      const dir = mkdtempSync(join(tmpdir(), prefix));
      dirs.push(dir);
      return dir;
    },
    async load(path, options) {
      const engine = await loadModelFromPath(path, options);
      engines.push(engine);
      return engine.generator as LlamaGenerator;
    },
  };
}

export { cpuLlamaWeights, readFolderTensors, splitFusedCpu } from './cpu-weights.ts';
