// The layers of src/, checked: every module imports only from its own layer or a lower one, sibling
// layers import neither each other, no modules import each other in a cycle, and the package
// entries only re-export. Reads the sources with the TypeScript parser (comments and strings that
// look like imports do not count), so it needs no build and no GPU.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/** The repository's src/, found from here upward (the test works from any folder under test/). */
function findSrc(dir: string): string {
  if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'src'))) return join(dir, 'src');
  if (dirname(dir) === dir) throw new Error('no src/ beside a package.json above test/layers.test.ts');
  return findSrc(dirname(dir));
}
const SRC = findSrc(import.meta.dirname);

// ---- THE LAYER TABLE (docs/architecture.md cites this table) ----
//
// Lowest rank first. A module may import from its own layer and from layers of lower rank. Layers
// of equal rank are siblings and import neither each other. This holds for every kind of import:
// `import`, `export ... from`, `import()`, and type-only ones (`import type`, `export type`,
// `typeof import()`): a type lives in the lowest layer that needs it, so a type two siblings share
// goes down to a layer below both, never sideways. Paths are relative to src/; an exact file
// outranks its folder.
//
// Within a layer any module may import any other, but no modules may import each other in a cycle,
// counting type-only imports too (a type two modules share lives in the lower one, or in a module
// both import). `import { type A } from` counts as a value import: tsconfig's verbatimModuleSyntax
// keeps it as `import {} from`, so the module still runs.
//
//   rank  layer        paths                        what it is
//   -1    declarations wgsl.d.ts                    ambient declarations (`*.wgsl?raw`); imports nothing
//    0    gpu          gpu/                         WebGPU device, buffers, kernels, weight formats
//    1    io           io/                          model files (URL, File, cache, hub) and their formats (GGUF, safetensors)
//    2    model        model/                       Llama config, weights, KV cache, forward pass
//    2    tokenizer    tokenizer/                   tokenizers and chat templates
//    2    sampling     sampling/                    token sampling on CPU and GPU, logprobs
//    3    engine       engine/                      opening and loading a model, the generation loop
//    3    grammar      grammar/                     structured output: grammars (XGrammar) and token constraints
//    4    api          api/                         OpenAI-style requests, the Engine, the fetch shim, loadModel
//    5    worker       worker/                      Web Worker and Service Worker placements
//    5    node         node/                        the Node host: Dawn, files from paths, HTTP, CLI
//    6    entry        index.ts, node/index.ts      the package entries: re-exports only
//
// Besides: the entries hold nothing but import and export declarations (the Node entry re-exports
// the browser entry and adds its own), and only node/ imports Node built-ins (`node:*`) and Dawn
// (`webgpu`); every other layer is browser code too. Imports of packages are not ranked.
const LAYERS: readonly { layer: string; rank: number; paths: readonly string[] }[] = [
  { layer: 'declarations', rank: -1, paths: ['wgsl.d.ts'] },
  { layer: 'gpu', rank: 0, paths: ['gpu/'] },
  { layer: 'io', rank: 1, paths: ['io/'] },
  { layer: 'model', rank: 2, paths: ['model/'] },
  { layer: 'tokenizer', rank: 2, paths: ['tokenizer/'] },
  { layer: 'sampling', rank: 2, paths: ['sampling/'] },
  { layer: 'engine', rank: 3, paths: ['engine/'] },
  { layer: 'grammar', rank: 3, paths: ['grammar/'] },
  { layer: 'api', rank: 4, paths: ['api/'] },
  { layer: 'worker', rank: 5, paths: ['worker/'] },
  { layer: 'node', rank: 5, paths: ['node/'] },
  { layer: 'entry', rank: 6, paths: ['index.ts', 'node/index.ts'] },
];

/** The layers that may import Node built-ins (`node:*`) and Dawn (`webgpu`); all others are browser code. */
const NODE_ONLY_LAYERS = new Set(['node']);

// ---- Reading the imports ----

type ImportKind = 'value' | 'type';

interface Edge {
  from: string; // path relative to src/, posix separators
  to: string; // the same for a module in src/; else the specifier as written
  kind: ImportKind;
  inSrc: boolean;
}

function listSources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return listSources(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

const toSrcPath = (path: string) => relative(SRC, path).split('\\').join('/');

/**
 * Every module specifier of a file with how it is used. `import type` / `export type` and
 * `typeof import()` are erased, so they are 'type'; everything else is 'value', including
 * `import { type A } from`, which tsconfig's verbatimModuleSyntax keeps as `import {} from` (the
 * module still runs).
 */
function moduleSpecifiers(fileName: string, text: string): { specifier: string; kind: ImportKind }[] {
  const source = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const found: { specifier: string; kind: ImportKind }[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
      found.push({ specifier: node.moduleSpecifier.text, kind: node.importClause?.isTypeOnly ? 'type' : 'value' });
    } else if (ts.isExportDeclaration(node) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier)) {
      found.push({ specifier: node.moduleSpecifier.text, kind: node.isTypeOnly ? 'type' : 'value' });
    } else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference)) {
      const expr = node.moduleReference.expression;
      if (ts.isStringLiteral(expr)) found.push({ specifier: expr.text, kind: node.isTypeOnly ? 'type' : 'value' });
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      const [arg] = node.arguments;
      // A computed import() cannot be checked: it fails the test rather than slip through.
      found.push({ specifier: arg && ts.isStringLiteralLike(arg) ? arg.text : `<computed import() at ${fileName}>`, kind: 'value' });
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument) && ts.isStringLiteral(node.argument.literal)) {
      found.push({ specifier: node.argument.literal.text, kind: 'type' });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** The src/ module a relative specifier names, or undefined when it points outside src/ (shaders, ...). */
function resolveInSrc(fromFile: string, specifier: string): string | undefined {
  const target = resolve(dirname(join(SRC, fromFile)), specifier.replace(/\?.*$/, ''));
  const path = toSrcPath(target);
  return path.startsWith('../') ? undefined : path;
}

function layerOf(path: string): { layer: string; rank: number } {
  const exact = LAYERS.find((l) => l.paths.includes(path));
  const folder = LAYERS.find((l) => l.paths.some((p) => p.endsWith('/') && path.startsWith(p)));
  const found = exact ?? folder;
  if (!found) throw new Error(`src/${path} is in no layer of the table in test/layers.test.ts`);
  return found;
}

/** One line per edge that breaks the table (upward, or between siblings). */
function layerViolations(edges: readonly Edge[]): string[] {
  const problems: string[] = [];
  for (const edge of edges) {
    if (!edge.inSrc) continue;
    const from = layerOf(edge.from);
    const to = layerOf(edge.to);
    const how = edge.kind === 'type' ? 'type import' : 'import';
    if (to.rank > from.rank) problems.push(`up: src/${edge.from} (${from.layer}) -> src/${edge.to} (${to.layer}), ${how}`);
    else if (to.rank === from.rank && to.layer !== from.layer) {
      problems.push(`sideways: src/${edge.from} (${from.layer}) -> src/${edge.to} (${to.layer}), ${how}`);
    }
  }
  return problems;
}

/**
 * Every import cycle: the strongly connected components of the module graph (Tarjan's algorithm),
 * each reported as one cycle path through its first module, a -> b -> ... -> a.
 */
function importCycles(edges: readonly Edge[]): string[] {
  const next = new Map<string, string[]>();
  for (const { from, to, inSrc } of edges) {
    if (!inSrc) continue;
    if (!next.has(from)) next.set(from, []);
    if (!next.has(to)) next.set(to, []);
    if (!next.get(from)!.includes(to)) next.get(from)!.push(to);
  }
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const components: string[][] = [];
  const connect = (v: string): void => {
    index.set(v, index.size);
    low.set(v, index.get(v)!);
    stack.push(v);
    onStack.add(v);
    for (const w of next.get(v)!) {
      if (!index.has(w)) {
        connect(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1 || next.get(v)!.includes(v)) components.push(component);
    }
  };
  for (const v of [...next.keys()].sort()) if (!index.has(v)) connect(v);

  // A shortest cycle through the component's first module (breadth-first, inside the component).
  return components.map((component) => {
    const members = new Set(component);
    const start = [...component].sort()[0];
    const parent = new Map<string, string>();
    const queue = [start];
    for (let i = 0; i < queue.length && !parent.has(start); i++) {
      for (const w of next.get(queue[i])!) {
        if (!members.has(w) || parent.has(w)) continue;
        parent.set(w, queue[i]);
        queue.push(w);
      }
    }
    const path = [start];
    for (let v = parent.get(start)!; v !== start; v = parent.get(v)!) path.unshift(v);
    path.unshift(start);
    const others = component.length > path.length - 1 ? ` (${component.length} modules in the cycle's component)` : '';
    return path.map((p) => `src/${p}`).join(' -> ') + others;
  });
}

// ---- The sources ----

const files = listSources(SRC).map((path) => ({ path: toSrcPath(path), text: readFileSync(path, 'utf8') }));
const modules = new Set(files.map((f) => f.path));
const edges: Edge[] = files.flatMap(({ path, text }) =>
  moduleSpecifiers(path, text).map(({ specifier, kind }) => {
    const inSrc = specifier.startsWith('.') ? resolveInSrc(path, specifier) : undefined;
    return { from: path, to: inSrc ?? specifier, kind, inSrc: inSrc !== undefined };
  }),
);

describe('the layers of src/', () => {
  it('reads the modules and their imports', () => {
    expect(files.length).toBeGreaterThan(50);
    expect(edges.length).toBeGreaterThan(200);
    expect(edges).toContainEqual({ from: 'tokenizer/chat-template.ts', to: 'tokenizer/jinja-runtime.ts', kind: 'value', inSrc: true });
  });

  it('puts every module in a layer of the table', () => {
    const unplaced = files.filter((f) => {
      try {
        return !layerOf(f.path);
      } catch {
        return true;
      }
    });
    expect(unplaced.map((f) => `src/${f.path}`)).toEqual([]);
  });

  it('resolves every relative import to a module in src/ (or a file outside it)', () => {
    const missing = edges.filter((e) => e.inSrc && !modules.has(e.to)).map((e) => `src/${e.from} -> src/${e.to}`);
    const computed = edges.filter((e) => e.to.startsWith('<computed')).map((e) => e.to);
    expect([...missing, ...computed]).toEqual([]);
  });

  it('imports only downward or within a layer, never up or between siblings', () => {
    expect(layerViolations(edges)).toEqual([]);
  });

  it('has no import cycles among modules', () => {
    expect(importCycles(edges)).toEqual([]);
  });

  it('imports Node built-ins and Dawn only in the Node host', () => {
    const nodeOnly = edges.filter((e) => !e.inSrc && (e.to.startsWith('node:') || e.to === 'webgpu') && !NODE_ONLY_LAYERS.has(layerOf(e.from).layer));
    expect(nodeOnly.map((e) => `src/${e.from} -> ${e.to}`)).toEqual([]);
  });

  it('keeps the package entries to re-exports', () => {
    const entries = LAYERS.find((l) => l.layer === 'entry')!.paths;
    const statements = entries.flatMap((path) => {
      const source = ts.createSourceFile(path, readFileSync(join(SRC, path), 'utf8'), ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
      return source.statements
        .filter((s) => !ts.isImportDeclaration(s) && !ts.isExportDeclaration(s))
        .map((s) => `src/${path}: ${s.getText(source).split('\n')[0]}`);
    });
    expect(statements).toEqual([]);
  });
});

describe('the layer checks themselves', () => {
  const edge = (from: string, to: string, kind: ImportKind = 'value'): Edge => ({ from, to, kind, inSrc: true });

  it('report an upward import, a sideways one and a type import between siblings', () => {
    expect(layerViolations([edge('sampling/chain.ts', 'engine/types.ts', 'type')])).toEqual([
      'up: src/sampling/chain.ts (sampling) -> src/engine/types.ts (engine), type import',
    ]);
    expect(layerViolations([edge('model/open-model.ts', 'tokenizer/hf-tokenizer.ts')])).toHaveLength(1);
    expect(layerViolations([edge('worker/host.ts', 'node/http.ts', 'type')])).toHaveLength(1);
    expect(layerViolations([edge('engine/load.ts', 'model/llama.ts'), edge('api/engine.ts', 'api/errors.ts')])).toEqual([]);
    expect(layerViolations([edge('node/cli.ts', 'index.ts')])).toEqual(['up: src/node/cli.ts (node) -> src/index.ts (entry), import']);
  });

  it('report a cycle with its path', () => {
    const cycles = importCycles([edge('api/a.ts', 'api/b.ts'), edge('api/b.ts', 'api/c.ts', 'type'), edge('api/c.ts', 'api/a.ts'), edge('api/c.ts', 'api/d.ts')]);
    expect(cycles).toEqual(['src/api/a.ts -> src/api/b.ts -> src/api/c.ts -> src/api/a.ts']);
    expect(importCycles([edge('api/a.ts', 'api/a.ts')])).toEqual(['src/api/a.ts -> src/api/a.ts']);
    expect(importCycles([edge('api/a.ts', 'api/b.ts'), edge('api/b.ts', 'api/c.ts')])).toEqual([]);
  });

  it('read every kind of specifier, and none from comments or strings', () => {
    const text = [
      "import { a } from './a.ts';",
      "import type { B } from './b.ts';",
      "import { type C } from './c.ts';",
      "export * from './d.ts';",
      "export type { E } from './e.ts';",
      "const f = await import('./f.ts');",
      "type G = typeof import('./g.ts');",
      "import './h.ts';",
      "// import { x } from './comment.ts';",
      "const s = \"import('./string.ts')\";",
    ].join('\n');
    expect(moduleSpecifiers('x.ts', text)).toEqual([
      { specifier: './a.ts', kind: 'value' },
      { specifier: './b.ts', kind: 'type' },
      { specifier: './c.ts', kind: 'value' },
      { specifier: './d.ts', kind: 'value' },
      { specifier: './e.ts', kind: 'type' },
      { specifier: './f.ts', kind: 'value' },
      { specifier: './g.ts', kind: 'type' },
      { specifier: './h.ts', kind: 'value' },
    ]);
  });

  it('place files by the table, an exact file before its folder', () => {
    expect(layerOf('node/index.ts').layer).toBe('entry');
    expect(layerOf('node/cli.ts').layer).toBe('node');
    expect(layerOf('io/formats/gguf.ts').layer).toBe('io');
    expect(() => layerOf('stray.ts')).toThrow(/no layer/);
  });
});
