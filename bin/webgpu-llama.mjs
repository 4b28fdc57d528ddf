#!/usr/bin/env node
// The CLI, run from TypeScript source (see run-ts.mjs).
import { register } from 'node:module';
import { register as registerTsx } from 'tsx/esm/api';

registerTsx();
register('./wgsl-loader.mjs', import.meta.url);
await import('../src/node/cli.ts');
