// The "Structured output" group of a parameter panel: what the output must be (a JSON schema, a
// regular expression, a choice of strings, a grammar), edited in one box with two example schemas,
// and sent as the endpoint's own parameter: response_format on chat, vLLM's guided_json /
// guided_regex / guided_choice / guided_grammar on completions (and the non-schema kinds on chat).

export type StructuredKind = 'none' | 'json_schema' | 'regex' | 'choice' | 'grammar';

const KINDS: { value: StructuredKind; label: string; placeholder: string }[] = [
  { value: 'none', label: 'None (free text)', placeholder: '' },
  { value: 'json_schema', label: 'JSON schema', placeholder: '{"type": "object", "properties": {…}}' },
  { value: 'regex', label: 'Regular expression', placeholder: '(yes|no), because [a-z ]+\\.' },
  { value: 'choice', label: 'One of (a line each)', placeholder: 'positive\nnegative\nneutral' },
  { value: 'grammar', label: 'Grammar (EBNF / GBNF)', placeholder: 'root ::= "(" [0-9]+ ")"' },
];

/** The two example schemas the editor offers. */
export const SCHEMA_EXAMPLES: Record<string, Record<string, unknown>> = {
  'A character': {
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 12 },
      age: { type: 'integer', minimum: 1, maximum: 99 },
      friends: { type: 'array', items: { type: 'string', maxLength: 12 }, maxItems: 2 },
      mood: { enum: ['happy', 'sad', 'sleepy'] },
    },
    required: ['name', 'age', 'mood'],
    additionalProperties: false,
  },
  'Weather call': {
    type: 'object',
    properties: {
      location: { type: 'string', description: 'City and country', maxLength: 24 },
      unit: { enum: ['celsius', 'fahrenheit'] },
      days: { type: 'integer', minimum: 1, maximum: 7 },
    },
    required: ['location', 'unit'],
    additionalProperties: false,
  },
};

function el<K extends keyof HTMLElementTagNameMap>(tag: K, props: Partial<HTMLElementTagNameMap[K]> = {}, ...children: (Node | string)[]): HTMLElementTagNameMap[K] {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children);
  return node;
}

export class StructuredPanel {
  readonly kind: HTMLSelectElement;
  readonly editor: HTMLTextAreaElement;
  private readonly examples: HTMLElement;

  constructor(
    container: HTMLElement,
    private readonly endpoint: 'completions' | 'chat',
    options: { idPrefix?: string; collapsed?: boolean } = {},
  ) {
    const id = options.idPrefix ?? 'structured-';
    this.kind = el('select', { id: `${id}kind` });
    for (const kind of KINDS) this.kind.append(el('option', { value: kind.value, textContent: kind.label }));
    this.editor = el('textarea', { id: `${id}spec`, rows: 8, spellcheck: false });
    this.editor.classList.add('json', 'structured-spec');
    this.examples = el('div', { className: 'structured-examples' }, 'Examples: ');
    for (const [name, schema] of Object.entries(SCHEMA_EXAMPLES)) {
      const button = el('button', { type: 'button', textContent: name });
      button.dataset.example = name;
      button.addEventListener('click', () => {
        this.editor.value = JSON.stringify(schema, null, 2);
        this.editor.dispatchEvent(new Event('input', { bubbles: true }));
      });
      this.examples.append(button, ' ');
    }
    const hint = el('p', {
      className: 'hint',
      textContent:
        'Decoding is constrained to the structure: an output that ends with finish_reason "stop" matches it, whatever the model. Sent as ' +
        (endpoint === 'chat' ? 'response_format (a schema) or guided_regex / guided_choice / guided_grammar.' : 'guided_json, guided_regex, guided_choice or guided_grammar (vLLM).'),
    });
    const grid = el(
      'div',
      { className: 'structured' },
      el('label', { htmlFor: this.kind.id, textContent: 'Output must be ' }, this.kind),
      this.examples,
      this.editor,
      hint,
    );
    const details = el('details', { open: !options.collapsed }, el('summary', { textContent: 'Structured output' }), grid);
    container.prepend(details);
    this.kind.addEventListener('change', () => this.sync());
    this.sync();
  }

  private sync(): void {
    const kind = KINDS.find((k) => k.value === this.kind.value)!;
    this.editor.hidden = kind.value === 'none';
    this.editor.placeholder = kind.placeholder;
    this.examples.hidden = kind.value !== 'json_schema';
  }

  /** Whether the output is asked to be JSON (then the page shows it pretty-printed). */
  get wantsJson(): boolean {
    return this.kind.value === 'json_schema';
  }

  /** The request fields for the structure; throws on a schema that is not JSON. */
  read(): Record<string, unknown> {
    const text = this.editor.value;
    switch (this.kind.value as StructuredKind) {
      case 'none':
        return {};
      case 'json_schema': {
        let schema: unknown;
        try {
          schema = text.trim() === '' ? { type: 'object' } : JSON.parse(text);
        } catch (error) {
          throw new Error(`The JSON schema is not JSON: ${(error as Error).message}`);
        }
        return this.endpoint === 'chat' ? { response_format: { type: 'json_schema', json_schema: { name: 'output', schema, strict: true } } } : { guided_json: schema };
      }
      case 'regex':
        return { guided_regex: text };
      case 'choice':
        return { guided_choice: text.split('\n').filter((line) => line !== '') };
      case 'grammar':
        return { guided_grammar: text };
    }
  }
}

/** `text` pretty-printed when it is JSON; null otherwise (an output cut by max_tokens). */
export function prettyJson(text: string): string | null {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return null;
  }
}
