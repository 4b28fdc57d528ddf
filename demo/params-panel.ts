// The request parameter panel: one control per row of one of the API's own parameter tables
// (COMPLETION_PARAMS in src/api/schema.ts by default; the Chat view passes the chat table),
// grouped, each showing the API's default and range. A parameter added to the table appears here
// by itself (in "Other").
//
// What gets sent: a number, text or JSON field when it is not empty; a checkbox or a choice when
// it differs from the API's default. So the request shown beside the output holds exactly what
// the user set, and an empty field means "the API's default". Values are sent as typed (no
// clamping to the ranges): the API itself says what is wrong with them.
import { COMPLETION_PARAMS, type ParamRow } from '../src/api/schema.ts';

interface ParamGroup {
  title: string;
  names: string[];
  open?: boolean;
}

const GROUPS: ParamGroup[] = [
  {
    title: 'Length and stop',
    names: ['max_tokens', 'max_completion_tokens', 'min_tokens', 'stop', 'stop_token_ids', 'ignore_eos', 'include_stop_str_in_output', 'skip_special_tokens'],
    open: true,
  },
  { title: 'Sampling', names: ['temperature', 'top_p', 'top_k', 'min_p', 'seed'], open: true },
  { title: 'Penalties and bias', names: ['presence_penalty', 'frequency_penalty', 'repetition_penalty', 'logit_bias'] },
  { title: 'Logprobs and echo', names: ['logprobs', 'top_logprobs', 'echo'], open: true },
  { title: 'Choices', names: ['n', 'best_of'] },
  { title: 'Streaming', names: ['stream', 'stream_options'] },
  { title: 'Tools', names: ['tool_choice', 'parallel_tool_calls'] },
  { title: 'Chat template', names: ['add_generation_prompt', 'continue_final_message', 'add_special_tokens', 'chat_template_kwargs'] },
];

/** The structured-output parameters: set in the panel's "Structured output" group (structured-panel.ts). */
export const STRUCTURED_PARAMS = [
  'response_format',
  'guided_json',
  'guided_regex',
  'guided_choice',
  'guided_grammar',
  'guided_whitespace_pattern',
  'guided_decoding_backend',
  'structured_outputs',
  'structural_tag',
];

/** Set elsewhere on the page (model, prompt), or only a container for the others (extra_body). */
const NOT_IN_PANEL = new Set<string>(['model', 'prompt', 'extra_body']);

/** Where the demo starts, when it differs from the API's default (empty fields mean the default). */
const DEMO_START: Record<string, string | boolean> = {
  max_tokens: '64',
  temperature: '0',
  logprobs: '5', // tokens tinted by probability, alternatives on hover
  stream: true,
  stream_options: true, // include_usage: the last chunk carries the token counts
};

/** Placeholders of the JSON fields: an example of what they take. */
const JSON_EXAMPLES: Record<string, string> = {
  stop: '["\\n\\n", "The end"]',
  logit_bias: '{"13": -100}',
  stop_token_ids: '[13]',
  tool_choice: 'auto, none, or {"type": "function", …}',
  chat_template_kwargs: '{"enable_thinking": false}',
};

type Row = ParamRow<unknown>;
/** A table of request parameters, as src/api/schema.ts writes them. */
export type ParamTable = Record<string, Row>;

export interface ParamsPanelOptions {
  /** Every group starts closed (on a phone, so that the output is near). */
  collapsed?: boolean;
  /** The table the controls come from; default COMPLETION_PARAMS. */
  table?: ParamTable;
  /** The controls' id prefix (default 'param-'): two panels on one page need different ones. */
  idPrefix?: string;
  /** More parameters left out (set elsewhere on the page, or not this endpoint's). */
  omit?: string[];
  /** Start values over the demo's own (a number field's text, a checkbox's state). */
  start?: Record<string, string | boolean>;
}

interface Control {
  name: string;
  row: Row;
  /** The value to send, `undefined` for "leave it to the API's default"; throws on malformed JSON. */
  read(): unknown;
  element: HTMLInputElement | HTMLSelectElement;
}


/** Numeric bounds from a row's range text ('[0, 2]', '(0, 1]', '>= 0', '> 0'), for the input's min and max. */
function parseRange(range: string | undefined): { min?: number; max?: number } {
  if (!range) return {};
  const interval = /^([[(])\s*(-?[\d.]+),\s*(-?[\d.]+)\]$/.exec(range);
  if (interval) return { ...(interval[1] === '[' ? { min: Number(interval[2]) } : {}), max: Number(interval[3]) };
  const lower = /^>=\s*(-?[\d.]+)$/.exec(range);
  if (lower) return { min: Number(lower[1]) };
  const upper = /^<=\s*(-?[\d.]+)$/.exec(range);
  if (upper) return { max: Number(upper[1]) };
  return {};
}

/** Whether a row's range allows negative numbers (no lower bound, or a negative one). */
function allowsNegatives(range: string | undefined): boolean {
  const lower = /^(?:[[(]\s*|>=?\s*)(-?[\d.]+)/.exec(range ?? '');
  return !lower || Number(lower[1]) < 0;
}

function kindOf(name: string, row: Row): 'number' | 'boolean' | 'choice' | 'text' | 'json' | 'include_usage' {
  if (name === 'stream_options') return 'include_usage';
  if (row.type === 'integer' || row.type === 'number') return 'number';
  if (row.type === 'boolean') return 'boolean';
  if (row.type === 'string') return 'text';
  if (/^'[^']+'(, '[^']+')* or '[^']+'$/.test(row.type)) return 'choice';
  return 'json';
}

function defaultText(row: Row): string {
  const shown = row.default instanceof Map ? '{}' : JSON.stringify(row.default);
  const nullValue = 'nullValue' in row ? `; null = ${JSON.stringify(row.nullValue)}` : '';
  return `default ${shown}${nullValue}`;
}

function el<K extends keyof HTMLElementTagNameMap>(tag: K, props: Partial<HTMLElementTagNameMap[K]> = {}, ...children: (Node | string)[]): HTMLElementTagNameMap[K] {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children);
  return node;
}

function createControl(name: string, row: Row, id: string, start: string | boolean | undefined): Control {
  switch (kindOf(name, row)) {
    case 'number': {
      const { min, max } = parseRange(row.range);
      const input = el('input', { id, type: 'number', step: row.type === 'integer' ? '1' : '0.05' });
      // A touch keyboard's digit pad has no minus key: only where the range allows no negatives
      // (elsewhere the number field's own keyboard, which has one).
      if (!allowsNegatives(row.range)) input.inputMode = row.type === 'integer' ? 'numeric' : 'decimal';
      if (min !== undefined) input.min = String(min);
      if (max !== undefined) input.max = String(max);
      input.placeholder = row.default === null ? 'null' : String(row.default);
      input.value = typeof start === 'string' ? start : '';
      // An entry the number input cannot hold (e.g. "1e") reads as '' with badInput set: report it.
      const read = () => {
        if (input.validity.badInput) throw new Error(`${name}: not a number.`);
        return input.value === '' ? undefined : Number(input.value);
      };
      return { name, row, element: input, read };
    }
    case 'boolean': {
      const input = el('input', { id, type: 'checkbox', checked: typeof start === 'boolean' ? start : row.default === true });
      return { name, row, element: input, read: () => (input.checked === row.default ? undefined : input.checked) };
    }
    case 'include_usage': {
      // stream_options is only allowed with stream: the checkbox is its include_usage.
      const input = el('input', { id, type: 'checkbox', checked: start === true });
      return { name, row, element: input, read: () => (input.checked && !input.disabled ? { include_usage: true } : undefined) };
    }
    case 'choice': {
      const options = [...row.type.matchAll(/'([^']+)'/g)].map((m) => m[1]!);
      const select = el('select', { id });
      for (const option of options) select.append(el('option', { value: option, textContent: option }));
      select.value = String(row.default);
      return { name, row, element: select, read: () => (select.value === row.default ? undefined : select.value) };
    }
    case 'text': {
      const input = el('input', { id, type: 'text', placeholder: row.default === null ? 'null' : JSON.stringify(row.default) });
      return { name, row, element: input, read: () => (input.value === '' ? undefined : input.value) };
    }
    case 'json': {
      const input = el('input', { id, type: 'text', placeholder: JSON_EXAMPLES[name] ?? 'JSON', spellcheck: false });
      input.classList.add('json');
      // A row whose type starts with quoted words ('none', 'auto', ... or an object) takes them bare too.
      const words = /^'/.test(row.type) ? [...row.type.matchAll(/'([^']+)'/g)].map((m) => m[1]) : [];
      const read = () => {
        if (input.value.trim() === '') return undefined;
        if (words.includes(input.value.trim())) return input.value.trim();
        try {
          return JSON.parse(input.value);
        } catch (error) {
          throw new Error(`${name} must be JSON (${row.type}), e.g. ${JSON_EXAMPLES[name] ?? '{}'}: ${(error as Error).message}`);
        }
      };
      return { name, row, element: input, read };
    }
  }
}

function controlRow(control: Control): HTMLElement {
  const { name, row } = control;
  const label = el('label', { htmlFor: control.element.id, title: row.doc }, el('code', { textContent: name }));
  if (row.extension) label.append(el('span', { className: 'tag', textContent: 'vLLM', title: 'vLLM sampling extension (top level or in extra_body)' }));
  const facts = [row.range, defaultText(row), kindOf(name, row) === 'json' ? 'JSON' : ''].filter(Boolean).join(' · ');
  // The doc is a hover title on a desktop; on a touch screen, tapping the facts line shows it.
  const doc = el('details', { className: 'hint' }, el('summary', { textContent: facts }), el('p', { className: 'param-doc', textContent: row.doc }));
  const wrapper = el('div', { className: 'param', title: row.doc }, label, control.element, doc);
  wrapper.dataset.param = name;
  if (control.element instanceof HTMLInputElement && control.element.type === 'checkbox') wrapper.classList.add('checkbox');
  return wrapper;
}

/** The panel: build it into `container`, then read the request's parameters from it. */
export class ParamsPanel {
  private readonly controls = new Map<string, Control>();

  constructor(container: HTMLElement, options: ParamsPanelOptions = {}) {
    const table: ParamTable = options.table ?? COMPLETION_PARAMS;
    // Rows that take only null (a parameter this runtime cannot honour) have nothing to set.
    const unsettable = Object.keys(table).filter((name) => table[name]!.type === 'null');
    const left = new Set([...NOT_IN_PANEL, ...unsettable, ...(options.omit ?? [])]);
    const start = { ...DEMO_START, ...options.start };
    const idPrefix = options.idPrefix ?? 'param-';
    const groups = GROUPS.map((g) => ({ ...g, names: g.names.filter((n) => n in table && !left.has(n)) })).filter((g) => g.names.length > 0);
    const others = Object.keys(table).filter((name) => !left.has(name) && !groups.some((g) => g.names.includes(name)));
    if (others.length > 0) groups.push({ title: 'Other', names: others });
    for (const group of groups) {
      const details = el('details', { open: !options.collapsed && (group.open ?? false) }, el('summary', { textContent: group.title }));
      const grid = el('div', { className: 'param-grid' });
      for (const name of group.names) {
        const control = createControl(name, table[name]!, `${idPrefix}${name}`, start[name]);
        this.controls.set(name, control);
        grid.append(controlRow(control));
      }
      details.append(grid);
      container.append(details);
    }
    container.append(
      el('p', {
        className: 'hint',
        textContent:
          'Empty fields are left to the API (the default shown). vLLM extensions are sent at the top level; the API also accepts them inside extra_body.',
      }),
    );
    // stream_options (include_usage) only goes with stream.
    const stream = this.controls.get('stream')?.element as HTMLInputElement | undefined;
    const usage = this.controls.get('stream_options')?.element as HTMLInputElement | undefined;
    if (stream && usage) {
      const sync = () => (usage.disabled = !stream.checked);
      stream.addEventListener('change', sync);
      sync();
    }
  }

  /** The panel's parameters as request fields; throws (naming the field) on malformed JSON. */
  read(): Record<string, unknown> {
    const body: Record<string, unknown> = {};
    for (const control of this.controls.values()) {
      const value = control.read();
      if (value !== undefined) body[control.name] = value;
    }
    return body;
  }

  /** The control of one parameter (the tint toggle fills in logprobs). */
  control(name: string): HTMLInputElement | HTMLSelectElement | undefined {
    return this.controls.get(name)?.element;
  }
}
