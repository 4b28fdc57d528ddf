// The npm package as users get it: `npm run build` writes dist/, package.json points every entry
// at it, `npm pack` ships exactly dist/, the bin, README, LICENSE and package.json, the browser entries
// reach no Node module (nor any bare import: a page with no bundler can load them), Node gets the
// Node entry from the bare name, bundlers may drop any module but the entries that act on import,
// and the CLI runs from an unpacked tarball with no TypeScript tooling.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
const dist = join(root, 'dist');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const reference = JSON.parse(readFileSync(join(root, 'test/fixtures/stories260K-reference.json'), 'utf8'));
const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8'));
const npm = (args: string[], cwd = root) => execFileSync('npm', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 170_000 });

/** Every module an entry loads: the entry and, recursively, the files it imports by relative path. */
function importGraph(entry: string): { files: string[]; specifiers: string[] } {
  const files = new Set<string>();
  const specifiers: string[] = [];
  const visit = (file: string) => {
    if (files.has(file)) return;
    files.add(file);
    const code = readFileSync(file, 'utf8');
    for (const match of code.matchAll(/(?:^|[;\n])\s*(?:import|export)\s[^'"]*?from\s*["']([^"']+)["']|(?:^|[;\n])\s*import\s*["']([^"']+)["']|\bimport\(\s*["']([^"']+)["']\s*\)/g)) {
      const specifier = (match[1] ?? match[2] ?? match[3])!;
      specifiers.push(specifier);
      if (specifier.startsWith('.')) visit(resolve(dirname(file), specifier));
    }
  };
  visit(entry);
  return { files: [...files], specifiers };
}

type Conditions = string | { [condition: string]: Conditions };

/** Every file an exports target names, through nested conditions. */
function exportTargets(target: Conditions): string[] {
  return typeof target === 'string' ? [target] : Object.values(target).flatMap(exportTargets);
}

/**
 * The top-level statements of a module that run code with an effect outside it when it is imported:
 * anything but imports, exports and declarations (a `const` initialised by a call builds a value
 * of the module's own and counts as a declaration).
 */
function importTimeStatements(file: string): string[] {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true, ts.ScriptKind.JS);
  const declaration = (s: ts.Statement) =>
    ts.isImportDeclaration(s) || ts.isExportDeclaration(s) || ts.isExportAssignment(s) || ts.isFunctionDeclaration(s) || ts.isClassDeclaration(s) || ts.isVariableStatement(s) || ts.isEmptyStatement(s);
  return source.statements.filter((s) => !declaration(s)).map((s) => s.getText(source));
}

describe('the npm package', () => {
  beforeAll(() => {
    npm(['run', 'build']);
  }, 180_000);

  test('every export, the types and the bin point at built files', () => {
    const targets: string[] = [pkg.main, pkg.types, ...Object.values(pkg.bin as Record<string, string>)];
    const checkOrder = (where: string, target: Conditions) => {
      if (typeof target === 'string') return;
      const keys = Object.keys(target);
      // Conditions match in object order: 'types' ahead of the JavaScript it describes, as TypeScript requires.
      if ('types' in target) expect(keys.indexOf('types'), `${where}: 'types' before 'default'`).toBeLessThan(keys.indexOf('default'));
      expect(keys.at(-1), `${where}: 'default' last`).toBe('default');
      for (const [condition, nested] of Object.entries(target)) checkOrder(`${where}.${condition}`, nested);
    };
    for (const [subpath, target] of Object.entries(pkg.exports as Record<string, Conditions>)) {
      checkOrder(subpath, target);
      targets.push(...exportTargets(target));
    }
    for (const target of targets) expect(existsSync(join(root, target)), target).toBe(true);
    expect(pkg.exports['.'].default).toBe('./dist/index.js');
    // Node (and TypeScript under NodeNext) gets the Node entry, types included, from the bare name;
    // it is the './node' entry. A target that sets both 'browser' and 'node' (Electron's renderer,
    // a DOM test environment) gets the browser entry: 'browser' comes first.
    expect(Object.keys(pkg.exports['.']).slice(0, 2)).toEqual(['browser', 'node']);
    expect(pkg.exports['.'].browser).toEqual({ types: pkg.exports['.'].types, default: pkg.exports['.'].default });
    expect(pkg.exports['.'].node).toEqual(pkg.exports['./node']);
    expect(pkg.exports['./node'].default).toBe('./dist/node.js');
    expect(pkg.exports['./service-worker'].default).toBe('./dist/service-worker.js');
    expect(pkg.exports['./worker']).toBe('./dist/worker.js');
  });

  test('webgpu is an optional peer in a caret range around the pinned devDependency, and the lock agrees', () => {
    expect(pkg.devDependencies.webgpu).toMatch(/^\d+\.\d+\.\d+$/);
    expect(pkg.peerDependencies.webgpu).toBe(`^${pkg.devDependencies.webgpu}`);
    expect(pkg.peerDependenciesMeta.webgpu.optional).toBe(true);
    expect(lock.packages[''].peerDependencies).toEqual(pkg.peerDependencies);
    expect(lock.packages[''].peerDependenciesMeta).toEqual(pkg.peerDependenciesMeta);
  });

  test('sideEffects lists exactly the entries that act when imported', () => {
    const entries = [...new Set(Object.values(pkg.exports as Record<string, Conditions>).flatMap(exportTargets))].filter((t) => t.endsWith('.js')).sort();
    const acting = entries.filter((entry) => importTimeStatements(join(root, entry)).length > 0);
    expect([...pkg.sideEffects].sort()).toEqual(acting);
    // What they do: the worker serves the engine host, the service worker hands over its template
    // engine and its structured-output grammars.
    expect(importTimeStatements(join(dist, 'worker.js'))).toEqual(['serveEngineHost(self, loadModel);']);
    expect(importTimeStatements(join(dist, 'service-worker.js'))).toEqual([expect.stringMatching(/^provideJinjaRuntime\(/), expect.stringMatching(/^preloadStructuredOutput\(/)]);
    // The other entries only declare and re-export: a bundler may drop them when nothing is used.
    for (const entry of ['index.js', 'node.js']) expect(importTimeStatements(join(dist, entry)), entry).toEqual([]);
  });

  test('the browser entries import no Node module and no bare specifier; the WGSL is inlined', () => {
    for (const entry of ['index.js', 'worker.js', 'service-worker.js']) {
      const { files, specifiers } = importGraph(join(dist, entry));
      expect(specifiers.filter((s) => !s.startsWith('./')), entry).toEqual([]);
      for (const file of files) {
        const code = readFileSync(file, 'utf8');
        expect(/\bfrom\s*["']node:|\bimport\(\s*["']node:|\brequire\(/.test(code), `${file} loads a Node module`).toBe(false);
      }
    }
    // Service workers may not call import(): the service worker's graph has only static imports,
    // but for those of the chunks the service worker entry imports statically and hands over before
    // anything could call them: the chat template engine (provideJinjaRuntime), the structured-output
    // grammar layer and XGrammar (preloadStructuredOutput).
    const worker = importGraph(join(dist, 'service-worker.js'));
    const staticImports = (file: string) => [...readFileSync(file, 'utf8').matchAll(/\bfrom\s*["'](\.\/[\w-]+\.js)["']/g)].map((m) => m[1]!);
    const preloaded = staticImports(join(dist, 'service-worker.js'));
    expect(preloaded.some((s) => /^\.\/jinja-/.test(s)), 'the service worker imports the template engine statically').toBe(true);
    expect(preloaded.some((s) => /^\.\/xgrammar-/.test(s)), 'the service worker imports XGrammar statically').toBe(true);
    for (const file of worker.files) {
      const code = readFileSync(file, 'utf8').replace(/\/\/.*$|\/\*[\s\S]*?\*\//gm, '');
      const dynamic = [...code.matchAll(/\bimport\(\s*["']([^"']*)["']\s*\)/g)].map((m) => m[1]!);
      expect(/\bimport\(/.test(code.replace(/\bimport\(\s*["'][^"']*["']\s*\)/g, '')), `${file} calls import() on a computed specifier`).toBe(false);
      for (const specifier of dynamic) {
        // A lazy entry re-exports chunks the worker already has.
        const lazy = preloaded.includes(specifier) || staticImports(join(dist, specifier)).every((s) => preloaded.includes(s));
        expect(lazy, `${file} imports ${specifier}`).toBe(true);
      }
    }
    // The WGSL is in the JavaScript as strings: no .wgsl file is fetched at run time.
    const code = importGraph(join(dist, 'index.js')).files.map((file) => readFileSync(file, 'utf8')).join('\n');
    expect(code.includes('@compute @workgroup_size')).toBe(true);
    // Only the Node entries reach node: modules and Dawn.
    const node = importGraph(join(dist, 'node.js')).specifiers;
    expect(node).toContain('webgpu');
    expect(node.some((s) => s.startsWith('node:'))).toBe(true);
  });

  test('npm pack ships dist, the bin, README, LICENSE and package.json — no sources, tests or models', () => {
    const [packed] = JSON.parse(npm(['pack', '--dry-run', '--json', '--ignore-scripts']));
    const paths: string[] = packed.files.map((file: { path: string }) => file.path).sort();
    const outside = paths.filter((path) => !path.startsWith('dist/'));
    expect(outside).toEqual(['LICENSE', 'README.md', 'bin/webgpu-llama.mjs', 'package.json']);
    for (const file of ['dist/index.js', 'dist/node.js', 'dist/cli.js', 'dist/worker.js', 'dist/service-worker.js', 'dist/types/index.d.ts', 'dist/types/node/index.d.ts']) {
      expect(paths).toContain(file);
    }
    expect(paths.filter((path) => /\.(ts|wgsl|gguf|safetensors)$/.test(path) && !path.endsWith('.d.ts'))).toEqual([]);
  });

  describe('installed from the tarball', () => {
    let dir: string;
    /** A second install, without the optional peer dependency. */
    let bare: string;
    beforeAll(() => {
      dir = mkdtempSync(join(tmpdir(), 'webgpu-llama-pack-'));
      bare = mkdtempSync(join(tmpdir(), 'webgpu-llama-bare-'));
      const tarball = JSON.parse(npm(['pack', '--json', '--ignore-scripts', '--pack-destination', dir]))[0].filename as string;
      for (const into of [dir, bare]) {
        const installed = join(into, 'node_modules', 'webgpu-llama');
        mkdirSync(installed, { recursive: true });
        execFileSync('tar', ['-xzf', join(dir, tarball), '-C', installed, '--strip-components=1']);
      }
      // The optional peer dependency, as a user installs it next to the package.
      symlinkSync(join(root, 'node_modules', 'webgpu'), join(dir, 'node_modules', 'webgpu'));
    }, 60_000);
    afterAll(() => {
      for (const path of [dir, bare]) if (path) rmSync(path, { recursive: true, force: true });
    });

    test('the CLI runs from dist (no src/, no tsx) and completes the reference text', () => {
      const installed = join(dir, 'node_modules', 'webgpu-llama');
      expect(existsSync(join(installed, 'src'))).toBe(false);
      const out = execFileSync(
        process.execPath,
        [join(installed, 'bin/webgpu-llama.mjs'), 'complete', '--model', join(root, 'public/models/stories260K/stories260K.gguf'), '--prompt', reference.prompt, '--temperature', '0', '--max-tokens', '32'],
        // A bound, so that a hang fails this test instead of blocking the run (execFileSync blocks vitest's own timeout).
        { cwd: dir, encoding: 'utf8', env: { ...process.env, NODE_PATH: '' }, timeout: 110_000 },
      );
      expect(out).toContain(reference.completion_text);
    }, 120_000);

    test('a TypeScript consumer (strict, NodeNext, no skipLibCheck) type-checks against the declarations', () => {
      mkdirSync(join(dir, 'node_modules', '@webgpu'), { recursive: true });
      symlinkSync(join(root, 'node_modules', '@webgpu', 'types'), join(dir, 'node_modules', '@webgpu', 'types'));
      writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: 'module' }));
      writeFileSync(
        join(dir, 'tsconfig.json'),
        JSON.stringify({
          compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, noEmit: true, lib: ['ES2023', 'DOM'], types: ['@webgpu/types'] },
          files: ['consumer.ts', 'consumer-node.ts'],
        }),
      );
      // NodeNext resolves with the 'node' condition: the bare name has the Node entry's declarations.
      writeFileSync(
        join(dir, 'consumer-node.ts'),
        [
          "import { loadModelFromPath, startServer, handleApiRequest, type Engine } from 'webgpu-llama';",
          "import * as node from 'webgpu-llama/node';",
          "const engine: Engine = await loadModelFromPath('/m.gguf', { contextLength: 256 });",
          'const same: typeof node.loadModelFromPath = loadModelFromPath;',
          'console.log(engine.info.id, same, startServer, handleApiRequest);',
        ].join('\n'),
      );
      writeFileSync(
        join(dir, 'consumer.ts'),
        [
          "import { installFetchShim, loadModel, loadModelInWorker, registerServiceWorkerEngine, ApiError } from 'webgpu-llama';",
          "import type { CompletionChunk, CompletionRequest, CompletionResponse, RemoteEngine } from 'webgpu-llama';",
          "import { serveEngineFromServiceWorker } from 'webgpu-llama/service-worker';",
          "const request: CompletionRequest = { model: 'stories260K', prompt: 'Once upon a time', max_tokens: 8 };",
          'const engine = await loadModel(\'/models/stories260K/\');',
          "const response: CompletionResponse = await engine.complete({ model: 'stories260K', prompt: 'Once upon a time' });",
          'const either: CompletionResponse | AsyncIterable<CompletionChunk> = await engine.complete(request);',
          'const chunks: AsyncIterable<CompletionChunk> = await engine.complete({ ...request, stream: true });',
          'const remote: RemoteEngine = await loadModelInWorker(\'/m.gguf\', { id: \'m\', contextLength: 256 });',
          'installFetchShim(remote);',
          'void registerServiceWorkerEngine(\'/sw.js\', { source: { repo: \'org/name\' } });',
          'serveEngineFromServiceWorker({ baseUrl: \'/v1\' });',
          'console.log(response.choices[0]?.text, either, chunks, remote.info.id, new ApiError(400, \'x\').status);',
          '// @ts-expect-error: temperature is a number',
          "const wrong: CompletionRequest = { model: 'm', prompt: 'p', temperature: 'hot' };",
          'console.log(wrong);',
        ].join('\n'),
      );
      const tsc = (project: string) => execFileSync(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', project], { cwd: dir, encoding: 'utf8', timeout: 110_000 });
      tsc(dir);
      // An older setup that ignores `exports` (moduleResolution node10): the subpaths' types come from typesVersions.
      writeFileSync(
        join(dir, 'tsconfig.node10.json'),
        JSON.stringify({
          compilerOptions: { target: 'ES2022', module: 'ES2022', moduleResolution: 'node10', strict: true, noEmit: true, lib: ['ES2023', 'DOM'], types: ['@webgpu/types'] },
          files: ['consumer.ts'],
        }),
      );
      tsc(join(dir, 'tsconfig.node10.json'));
    }, 120_000);

    test('the Node entry resolves by its package name from the installed copy', () => {
      const out = execFileSync(process.execPath, ['--input-type=module', '-e', "const m = await import('webgpu-llama/node'); console.log(typeof m.loadModelFromPath, typeof m.startServer, typeof m.installFetchShim)"], {
        cwd: dir,
        encoding: 'utf8',
      });
      expect(out.trim()).toBe('function function function');
    });

    test("in Node, 'webgpu-llama' is the Node entry: everything of the browser entry and the Node extras", () => {
      const script = [
        "const url = import.meta.resolve('webgpu-llama');",
        "const bare = await import('webgpu-llama');",
        "const node = await import('webgpu-llama/node');",
        "const browser = await import(new URL('./index.js', url).href);",
        'console.log(JSON.stringify({ url, same: bare === node, missing: Object.keys(browser).filter((name) => !(name in bare)), loadModel: bare.loadModel === browser.loadModel, extras: ["loadModelFromPath", "startServer", "createNodeGpu", "nodeGpuContext", "filesFromPath"].filter((name) => typeof bare[name] === "function") }));',
      ].join('\n');
      const out = JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script], { cwd: dir, encoding: 'utf8' }));
      expect(out.url).toBe(pathToFileURL(join(realpathSync(dir), 'node_modules/webgpu-llama/dist/node.js')).href);
      expect(out.same).toBe(true);
      expect(out.missing).toEqual([]);
      expect(out.loadModel, 'loadModel is the Node one (paths, Dawn)').toBe(false);
      expect(out.extras).toEqual(['loadModelFromPath', 'startServer', 'createNodeGpu', 'nodeGpuContext', 'filesFromPath']);
    });

    test('without the optional webgpu package the Node entry still imports; asking it for a GPU names the package', () => {
      const script = [
        "const m = await import('webgpu-llama');",
        'console.log(typeof m.handleApiRequest, typeof m.loadModelFromPath);',
        "await m.createNodeGpu().then(() => console.log('no error'), (err) => console.log(err.message));",
      ].join('\n');
      const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], { cwd: bare, encoding: 'utf8', env: { ...process.env, NODE_PATH: '' } });
      expect(out.trim().split('\n')).toEqual(['function function', 'the Node host needs the `webgpu` package (Dawn): npm install webgpu@0.6.2']);
    });
  });
});
