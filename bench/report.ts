// The bench's tables (plain text, aligned columns) and the ours / wllama ratios.
import type { CaseFigures } from './cases.ts';
import type { FamilyFigures, SideFigures } from './families.ts';
import type { Stat } from './measure.ts';
import type { ProbeFigures } from './probes.ts';
import type { WllamaFigures } from './wllama.ts';

export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) => cells.map((c, i) => (c ?? '').padEnd(widths[i])).join('  ').trimEnd();
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

const firstLine = (text: string) => text.split('\n')[0].slice(0, 160);
const fmt = (x: number, digits: number) => (Number.isFinite(x) ? x.toFixed(digits) : '-');

/** "median (min-max)", or the median alone for one run. */
export function statCell(s: Stat, digits = 0): string {
  if (s.runs.length <= 1) return fmt(s.median, digits);
  return `${fmt(s.median, digits)} (${fmt(s.min, digits)}-${fmt(s.max, digits)})`;
}

export function casesTable(cases: CaseFigures[]): string {
  return table(
    ['host', 'model', 'storage', 'runs', 'load ms', 'TTFT ms', 'prefill tok/s', 'decode tok/s'],
    cases.map((c) =>
      c.error
        ? [c.host, c.model, c.storage, String(c.runs), `ERROR: ${firstLine(c.error)}`]
        : [
            c.host,
            c.model,
            c.storage,
            String(c.runs),
            statCell(c.load_ms),
            statCell(c.ttft_ms),
            `${statCell(c.prefill_tokens_per_s, c.prefill_tokens_per_s.median < 100 ? 1 : 0)} [${c.prompt_tokens} tok]`,
            `${statCell(c.decode_tokens_per_s, c.decode_tokens_per_s.median < 100 ? 2 : 1)} [${c.decode_tokens} tok]`,
          ],
    ),
  );
}

export function countersTable(cases: CaseFigures[]): string {
  const ok = cases.filter((c) => !c.error);
  const n = (x: number) => fmt(x, Number.isInteger(x) ? 0 : 2);
  return table(
    ['host', 'model', 'storage', 'dispatches', 'passes', 'copies', 'submits', 'cmd buffers', 'read-backs', 'buffers', 'bind groups', 'writeBuffer', 'prefill: dispatches/submits/read-backs'],
    ok.map((c) => {
      const p = c.per_decode_token;
      const f = c.prefill_counts;
      return [c.host, c.model, c.storage, n(p.dispatches), n(p.computePasses), n(p.copies), n(p.submits), n(p.commandBuffers), n(p.readBacks), n(p.buffersCreated), n(p.bindGroupsCreated), n(p.writeBuffers), `${f.dispatches}/${f.submits}/${f.readBacks}`];
    }),
  );
}

export function probesTable(probes: Partial<Record<string, ProbeFigures & { adapter: string }>>): string {
  const entries = Object.entries(probes).filter((e): e is [string, ProbeFigures & { adapter: string }] => !!e[1]);
  const dtypes = [...new Set(entries.flatMap(([, p]) => p.matvec.map((m) => m.dtype)))];
  return table(
    ['host', 'copy GB/s', 'dispatch us', 'empty submit ms', 'idle read-back ms', ...dtypes.map((d) => `matvec ${d} GB/s (x copy)`)],
    entries.map(([host, p]) => [
      host,
      fmt(p.copy_gb_per_s, 2),
      fmt(p.dispatch_us, 1),
      fmt(p.submit_roundtrip_ms, 3),
      fmt(p.readback_ms, 3),
      ...dtypes.map((d) => {
        const m = p.matvec.find((x) => x.dtype === d);
        return m && !m.error ? `${fmt(m.weight_gb_per_s, 2)} (${fmt(m.fraction_of_copy, 3)})` : 'ERROR';
      }),
    ]),
  );
}

export interface Ratios {
  load_ms: number;
  ttft_ms: number;
  prefill_tokens_per_s: number;
  decode_tokens_per_s: number;
}

/** ours / theirs, per metric (medians). For tokens/s above 1 is faster; for ms below 1 is faster. */
export function ratios(ours: CaseFigures, theirs: Pick<WllamaFigures, keyof Ratios>): Ratios {
  const r = (a: Stat, b: Stat) => Number((a.median / b.median).toFixed(3));
  return {
    load_ms: r(ours.load_ms, theirs.load_ms),
    ttft_ms: r(ours.ttft_ms, theirs.ttft_ms),
    prefill_tokens_per_s: r(ours.prefill_tokens_per_s, theirs.prefill_tokens_per_s),
    decode_tokens_per_s: r(ours.decode_tokens_per_s, theirs.decode_tokens_per_s),
  };
}

/** wllama's best median per metric over its settings (least ms, most tokens/s). */
export function bestOf(settings: WllamaFigures[]): Pick<WllamaFigures, keyof Ratios> {
  const ok = settings.filter((s) => !s.error);
  const pick = (key: keyof Ratios, better: (a: number, b: number) => boolean): Stat =>
    ok.map((s) => s[key]).reduce((best, s) => (better(s.median, best.median) ? s : best));
  return {
    load_ms: pick('load_ms', (a, b) => a < b),
    ttft_ms: pick('ttft_ms', (a, b) => a < b),
    prefill_tokens_per_s: pick('prefill_tokens_per_s', (a, b) => a > b),
    decode_tokens_per_s: pick('decode_tokens_per_s', (a, b) => a > b),
  };
}

export function wllamaTable(ours: CaseFigures | undefined, settings: WllamaFigures[]): string {
  const rows: string[][] = [];
  if (ours && !ours.error) {
    rows.push(['webgpu-llama (chromium)', '-', statCell(ours.load_ms), statCell(ours.ttft_ms), statCell(ours.prefill_tokens_per_s), statCell(ours.decode_tokens_per_s, 1), '-']);
  }
  for (const s of settings) {
    if (s.error) {
      rows.push([`wllama ${s.threads_requested} thread${s.threads_requested > 1 ? 's' : ''}`, `ERROR: ${firstLine(s.error)}`]);
      continue;
    }
    rows.push([
      `wllama ${s.threads_requested} thread${s.threads_requested > 1 ? 's' : ''}`,
      `${s.threads}${s.multi_thread ? ' (pthreads)' : ''}`,
      statCell(s.load_ms),
      statCell(s.ttft_ms, 1),
      statCell(s.prefill_tokens_per_s),
      statCell(s.decode_tokens_per_s, 1),
      `${fmt(s.own_prompt_per_second, 0)} / ${fmt(s.own_predicted_per_second, 0)}`,
    ]);
  }
  const ok = settings.filter((s) => !s.error);
  if (ours && !ours.error) {
    for (const s of ok) {
      const r = ratios(ours, s);
      rows.push([`ours / wllama ${s.threads_requested}t`, '', fmt(r.load_ms, 2), fmt(r.ttft_ms, 2), fmt(r.prefill_tokens_per_s, 2), fmt(r.decode_tokens_per_s, 2), '']);
    }
    if (ok.length > 1) {
      const r = ratios(ours, bestOf(ok));
      rows.push(['ours / wllama best', '', fmt(r.load_ms, 2), fmt(r.ttft_ms, 2), fmt(r.prefill_tokens_per_s, 2), fmt(r.decode_tokens_per_s, 2), '']);
    }
  }
  return table(['runtime', 'threads', 'load ms', 'TTFT ms', 'prefill tok/s', 'decode tok/s', "llama.cpp's own prefill / decode tok/s"], rows);
}

/**
 * A side's decode path with why the next faster one does not run it: the refusal (decode-step.ts,
 * decode-layers.ts), or "tuning" where decode_layer.wgsl could run the model but the kernels'
 * tuning does not take it for these weights on this adapter (Kernels.usesDecodeLayer).
 */
function pathCell(side: SideFigures): string {
  const why = side.decode_path === 'general' ? side.refusals.fused : side.decode_path === 'fused' ? side.refusals.decode_layer ?? 'tuning' : undefined;
  return `${side.decode_path}${why ? ` (${why})` : ''} ${fmt(side.dispatches_per_token, 0)}/tok`;
}

/** Dispatches of a prefill (max_tokens 1) request, family | Llama. */
function prefillDispatches(f: FamilyFigures): string {
  return `${f.family_model!.prefill_dispatches} | ${f.llama!.prefill_dispatches}`;
}

/**
 * The families case (bench/families.ts): per host and family, prefill and decode tokens/s of the
 * family's model and of its Llama twin (same dims), family / Llama (median of per-run ratios: 1 is
 * as fast; the aim is at least 0.85), and each side's decode path with dispatches per token.
 */
export function familiesTable(figures: FamilyFigures[]): string {
  const tps = (s: Stat) => statCell(s, s.median < 100 ? 1 : 0);
  const measured = figures.filter((f) => !f.skipped && !f.error && f.family_model && f.llama && f.ratio);
  const rows = table(
    ['host', 'family', 'runs', 'prompt tok', 'prefill tok/s family | Llama', 'prefill ratio', 'prefill dispatches', 'decode tok/s family | Llama', 'decode ratio', 'decode path family | Llama'],
    measured.map((f) => [
      f.host,
      f.family,
      String(f.runs),
      `${f.prompt_tokens} (+${f.decode_tokens})`,
      `${tps(f.family_model!.prefill_tokens_per_s)} | ${tps(f.llama!.prefill_tokens_per_s)}`,
      fmt(f.ratio!.prefill_tokens_per_s, 2),
      prefillDispatches(f),
      `${tps(f.family_model!.decode_tokens_per_s)} | ${tps(f.llama!.decode_tokens_per_s)}`,
      fmt(f.ratio!.decode_tokens_per_s, 2),
      `${pathCell(f.family_model!)} | ${pathCell(f.llama!)}`,
    ]),
  );
  // Skipped families and errors below the table, whole (their reasons are long).
  const notes = figures
    .filter((f) => !measured.includes(f))
    .map((f) => `${f.host} ${f.family}: ${f.skipped ? `skipped: ${f.skipped}` : `ERROR: ${f.error ?? 'no figures'}`}`);
  return [rows, ...notes].join('\n');
}
