#!/usr/bin/env node
// The `webgpu-llama` command. Installed from npm it runs the built CLI (dist/cli.js); in a
// checkout of the repository, where src/ exists, it runs the TypeScript source through tsx (and
// bin/wgsl-loader.mjs for `*.wgsl?raw` imports), so no build step is needed and dist/ is never stale.
// Dawn (the `webgpu` package) is not loaded here: the CLI loads it only to load a model (with a
// one-line message if it fails), so `--help` and argument errors work without it.
import { existsSync } from 'node:fs';

const source = new URL('../src/node/cli.ts', import.meta.url);
const built = new URL('../dist/cli.js', import.meta.url);

async function importSource() {
  const { register } = await import('node:module');
  const { register: registerTsx } = await import('tsx/esm/api');
  registerTsx();
  register('./wgsl-loader.mjs', import.meta.url);
  return import(source.href);
}

const fromSource = existsSync(source) && existsSync(new URL('./wgsl-loader.mjs', import.meta.url));
const cli = fromSource ? await importSource() : await import(built.href);
await cli.main();
