// The structured-output guarantee, proven on real decoding: for every structure in
// test/fixtures/structured-cases.ts (22 JSON schemas, 5 regexes, 3 choice lists, 2 grammars), on a
// random-weight model (llama-2-tiny-random: Llama 2's 32,000-token vocabulary, gibberish weights)
// and on stories260K (a trained model with a 512-token byte-fallback vocabulary), 12 sequences
// (n = 12, one random stream each) at temperature 1: every output that ends with finish_reason
// "stop" is valid, checked independently of XGrammar (ajv with formats for the schemas, RegExp,
// the choice list, a parser per grammar). Outputs cut by max_tokens ("length") may be incomplete,
// as in OpenAI's API; a share of them must stop, or the check would prove nothing.
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/api/engine.ts';
import { loadModelFromPath } from '../../src/node/index.ts';
import { STRUCTURED_CASES } from '../fixtures/structured-cases.ts';
import { STORIES_GGUF, TINY_GGUF } from '../helpers/model-files.ts';

const SEQUENCES = 12;
const MAX_TOKENS = 48;

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);

const MODELS: [string, string, string][] = [
  ['llama-2-tiny-random (random weights)', TINY_GGUF, 'Here is the answer:'],
  ['stories260K', STORIES_GGUF, 'Once upon a time'],
];

for (const [label, path, prompt] of MODELS) {
  describe(`structured output on ${label}: every output that stops is valid`, () => {
    let engine: Engine;
    const stoppedPerCase = new Map<string, number>();
    beforeAll(async () => {
      engine = await loadModelFromPath(path, { id: 'm', contextLength: 256 });
    }, 120_000);
    afterAll(async () => {
      await engine?.unload();
    });

    for (const [i, c] of STRUCTURED_CASES.entries()) {
      it(c.name, async () => {
        const response = await engine.complete({
          model: 'm',
          prompt,
          n: SEQUENCES,
          temperature: 1,
          seed: 1000 + i,
          max_tokens: MAX_TOKENS,
          extra_body: c.request,
        } as never);
        expect(response.choices).toHaveLength(SEQUENCES);
        const validate = c.schema ? ajv.compile(c.schema) : null;
        let stopped = 0;
        for (const choice of response.choices) {
          expect(['stop', 'length']).toContain(choice.finish_reason);
          if (choice.finish_reason !== 'stop') continue;
          stopped++;
          if (validate) {
            let value: unknown;
            expect(() => (value = JSON.parse(choice.text)), `not JSON: ${JSON.stringify(choice.text)}`).not.toThrow();
            expect(validate(value), `${JSON.stringify(choice.text)}: ${ajv.errorsText(validate.errors)}`).toBe(true);
          } else {
            expect(c.accepts!(choice.text), JSON.stringify(choice.text)).toBe(true);
          }
        }
        stoppedPerCase.set(c.name, stopped);
      }, 300_000);
    }

    it('enough outputs stopped for the checks to mean something', () => {
      const cases = [...stoppedPerCase.values()];
      expect(cases).toHaveLength(STRUCTURED_CASES.length);
      const total = cases.reduce((a, b) => a + b, 0);
      console.log(`${label}: ${total} of ${cases.length * SEQUENCES} outputs stopped; per structure ${JSON.stringify(Object.fromEntries(stoppedPerCase))}`);
      // Choices, enums, numbers and short regexes end within a few tokens on any model.
      expect(cases.filter((n) => n > 0).length, JSON.stringify(Object.fromEntries(stoppedPerCase))).toBeGreaterThanOrEqual(10);
      expect(total).toBeGreaterThanOrEqual(100);
    });
  });
}
