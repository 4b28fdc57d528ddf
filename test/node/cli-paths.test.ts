// The model path is checked before the GPU is touched, and Dawn failing to load is one clear line.
// The GPU here is a mock that records being asked (and fails, as on a machine without one).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';

vi.mock('../../src/node/gpu.ts', async (importOriginal) => ({
  ...(await importOriginal<typeof import('../../src/node/gpu.ts')>()),
  SWIFTSHADER_ICD: '',
  createNodeGpu: vi.fn(async () => {
    throw new Error('No WebGPU adapter found.');
  }),
  nodeGpuContext: vi.fn(async () => {
    throw new Error('No WebGPU adapter found.');
  }),
}));

const { nodeGpuContext } = await import('../../src/node/gpu.ts');
const { loadModel, loadModelFromPath } = await import('../../src/node/index.ts');
const { checkModelPath } = await import('../../src/node/files.ts');
const { loadDawn, runCli } = await import('../../src/node/cli.ts');

const dir = mkdtempSync(join(tmpdir(), 'webgpu-llama-paths-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('a wrong model path', () => {
  it('fails naming the absolute path, before the GPU is acquired', async () => {
    const missing = `no such file or directory: ${resolve('typo.gguf')}`;
    await expect(loadModelFromPath('./typo.gguf')).rejects.toThrow(missing);
    await expect(loadModel('./typo.gguf')).rejects.toThrow(missing);
    await expect(loadModelFromPath(join(dir, 'no-folder'))).rejects.toThrow(`no such file or directory: ${join(dir, 'no-folder')}`);
    expect(nodeGpuContext).not.toHaveBeenCalled();
  });

  it('says what is wrong with a path that exists', async () => {
    mkdirSync(join(dir, 'folder.gguf'));
    writeFileSync(join(dir, 'model.bin'), 'x');
    await expect(checkModelPath(join(dir, 'folder.gguf'))).rejects.toThrow(`${join(dir, 'folder.gguf')} is a folder, not a .gguf file`);
    await expect(checkModelPath(join(dir, 'model.bin'))).rejects.toThrow(`${join(dir, 'model.bin')} is neither a .gguf file nor a folder`);
    writeFileSync(join(dir, 'ok.gguf'), 'x');
    await expect(checkModelPath(join(dir, 'ok.gguf'))).resolves.toBeUndefined();
    await expect(checkModelPath(dir)).resolves.toBeUndefined();
  });

  it('is what the CLI reports, without starting the GPU', async () => {
    const err: string[] = [];
    const code = await runCli(['complete', '--model', './typo.gguf', '--prompt', 'x'], {
      stdout: { write: () => true },
      stderr: { write: (s: string) => err.push(s) },
    });
    expect(code).toBe(1);
    expect(err.join('')).toContain(`no such file or directory: ${resolve('typo.gguf')}`);
    expect(nodeGpuContext).not.toHaveBeenCalled();
  });
});

describe('loadDawn', () => {
  it('explains a missing webgpu package in one line', async () => {
    const missing = Object.assign(new Error("Cannot find package 'webgpu' imported from /app/dist/cli.js"), { code: 'ERR_MODULE_NOT_FOUND' });
    await expect(loadDawn(() => Promise.reject(missing))).rejects.toThrow(/^the Node host needs the `webgpu` package \(Dawn\): npm install webgpu@0\.6\.2$/);
  });

  it('explains a native binary that fails to load in one line, with the cause', async () => {
    const noBinary = Object.assign(
      new Error("Cannot find module '/app/node_modules/webgpu/dist/freebsd-x64/dawn.node'\nRequire stack:\n- /app/node_modules/webgpu/index.js"),
      { code: 'MODULE_NOT_FOUND' },
    );
    const dlopen = new Error('libvulkan.so.1: cannot open shared object file: No such file or directory');
    for (const cause of [noBinary, dlopen]) {
      const error = await loadDawn(() => Promise.reject(cause)).catch((e: Error) => e);
      expect(error).toBeInstanceOf(Error);
      expect((error as Error).message).not.toContain('\n');
      expect((error as Error).message).toMatch(/^the `webgpu` package \(Dawn\) failed to load: /);
      expect((error as Error).message).toContain(cause.message.split('\n')[0]);
    }
  });

  it('resolves when Dawn loads', async () => {
    await expect(loadDawn(async () => ({}))).resolves.toBeUndefined();
  });
});
