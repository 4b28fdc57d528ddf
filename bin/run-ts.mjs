#!/usr/bin/env node
// Runs a TypeScript entry of this package straight from source (no build step):
// tsx compiles TypeScript, bin/wgsl-loader.mjs turns `*.wgsl?raw` imports into strings.
import { register } from 'node:module';
import { pathToFileURL } from 'node:url';
import { register as registerTsx } from 'tsx/esm/api';

registerTsx();
register('./wgsl-loader.mjs', import.meta.url);

const [entry, ...args] = process.argv.slice(2);
if (!entry) {
  console.error('usage: run-ts.mjs ENTRY.ts [args...]');
  process.exit(2);
}
process.argv = [process.argv[0], entry, ...args];
await import(pathToFileURL(entry).href);
