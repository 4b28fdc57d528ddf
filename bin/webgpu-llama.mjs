#!/usr/bin/env node
// The `webgpu-llama` command. Installed from npm it runs the built CLI (dist/cli.js); in a
// checkout of the repository, where src/ exists, it runs the TypeScript source through tsx (and
// bin/wgsl-loader.mjs for `*.wgsl?raw` imports), so no build step is needed and dist/ is never stale.
import { existsSync } from 'node:fs';

const source = new URL('../src/node/cli.ts', import.meta.url);
const built = new URL('../dist/cli.js', import.meta.url);

async function runFromSource() {
  const { register } = await import('node:module');
  const { register: registerTsx } = await import('tsx/esm/api');
  registerTsx();
  register('./wgsl-loader.mjs', import.meta.url);
  await import(source.href);
}

async function checkDawn() {
  try {
    await import('webgpu');
  } catch (err) {
    if (err?.code !== 'ERR_MODULE_NOT_FOUND') throw err;
    console.error('webgpu-llama: the Node host needs the `webgpu` package (Dawn): npm install webgpu@0.6.2');
    process.exit(1);
  }
}

if (existsSync(source) && existsSync(new URL('./wgsl-loader.mjs', import.meta.url))) {
  await runFromSource();
} else {
  await checkDawn();
  await import(built.href);
}
