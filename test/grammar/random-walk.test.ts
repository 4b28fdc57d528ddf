// The guarantee structured output gives: whatever allowed tokens are sampled, the text is valid.
// Random walks on Qwen2.5's vocabulary (seeded): at each step the forced tokens, then a random
// token the mask allows (half the time one that closes a string or a container, so walks end),
// until the stop token; the text must parse as JSON and validate against the schema (ajv).
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { describe, expect, it } from 'vitest';
import { compileStructuredOutput, type JsonWhitespace } from '../../src/grammar/structured-output.ts';
import { grammarTokenizer } from '../helpers/grammar-tokenizers.ts';
import { allowedIds } from '../helpers/grammar-walk.ts';
import { mulberry32 } from '../helpers/prng.ts';

const SCHEMAS: Record<string, Record<string, unknown>> = {
  person: {
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 12 },
      age: { type: 'integer', minimum: 0, maximum: 150 },
      score: { type: 'number' },
      member: { type: 'boolean' },
      tags: { type: 'array', items: { type: 'string', enum: ['red', 'green', 'blue'] }, maxItems: 3 },
      address: { type: 'object', properties: { city: { type: 'string' }, zip: { type: 'string', pattern: '^[0-9]{5}$' } }, required: ['city'] },
      nickname: { anyOf: [{ type: 'string' }, { type: 'null' }] },
    },
    required: ['name', 'age', 'tags', 'address'],
  },
  list: {
    type: 'array',
    items: { type: 'object', properties: { id: { type: 'integer' }, done: { type: 'boolean' } }, required: ['id', 'done'] },
    minItems: 1,
    maxItems: 3,
  },
  tree: {
    $defs: { node: { type: 'object', properties: { value: { type: 'integer' }, children: { type: 'array', items: { $ref: '#/$defs/node' }, maxItems: 2 } }, required: ['value'] } },
    $ref: '#/$defs/node',
  },
};

const WHITESPACE: JsonWhitespace[] = [{ kind: 'compact' }, { kind: 'any', maxRun: 3 }];

describe('random walks on Qwen2.5', () => {
  const { tokenizer, vocabSize } = grammarTokenizer('Qwen2.5');
  const eos = tokenizer.eosIds[0]!;
  const ajv = new Ajv2020({ strict: false });
  addFormats(ajv);
  /** Tokens whose text closes a string or a container (or is one digit): the walk's way out. */
  const closing = new Uint8Array(vocabSize);
  for (let id = 0; id < tokenizer.vocabSize; id++) {
    if (tokenizer.isSpecial(id)) continue;
    const text = new TextDecoder().decode(tokenizer.tokenBytes!(id));
    if (/["}\]]/.test(text) || /^[0-9]$/.test(text)) closing[id] = 1;
  }

  for (const [name, schema] of Object.entries(SCHEMAS)) {
    for (const whitespace of WHITESPACE) {
      it(`${name}, ${whitespace.kind} whitespace: every walk is valid JSON that the schema accepts`, async () => {
        const compiled = await compileStructuredOutput(tokenizer, vocabSize, { type: 'json_schema', schema, whitespace });
        const validate = ajv.compile(schema);
        const random = mulberry32(name.length * 7919 + whitespace.kind.length);
        const mask = new Uint32Array(Math.ceil(vocabSize / 32));
        for (let walk = 0; walk < 8; walk++) {
          const constraint = await compiled.createConstraint([eos]);
          const ids: number[] = [];
          let stopped = false;
          for (let step = 0; step < 600 && !stopped; step++) {
            ids.push(...constraint.forced());
            await constraint.fillNextMask(mask);
            const allowed = allowedIds(mask, vocabSize);
            expect(allowed.length, `a token is allowed after ${JSON.stringify(tokenizer.decode(ids))}`).toBeGreaterThan(0);
            const closers = allowed.filter((id) => closing[id] === 1 || id === eos);
            const pool = closers.length > 0 && random() < 0.5 ? closers : allowed;
            const id = pool[Math.floor(random() * pool.length)]!;
            expect(constraint.accept(id)).toBe(true);
            if (id === eos) stopped = true;
            else ids.push(id);
          }
          constraint.dispose();
          expect(stopped, `walk ${walk} ended`).toBe(true);
          const text = tokenizer.decode(ids);
          let value: unknown;
          expect(() => (value = JSON.parse(text)), text).not.toThrow();
          expect(validate(value), `${text}\n${JSON.stringify(validate.errors)}`).toBe(true);
          if (whitespace.kind === 'compact') expect(text).not.toMatch(/\n/);
        }
      });
    }
  }
});
