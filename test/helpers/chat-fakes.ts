// A fake generator that chats: the fake model (helpers/fake-generator.ts) with a ChatML chat
// template whose tools and calls are written as Hermes' <tool_call> blocks, and a function tool.
import { FakeGenerator, type FakeGeneratorOptions } from './fake-generator.ts';

/** ChatML, with tools in a system turn and calls written as Hermes' <tool_call> blocks. */
export const CHATML = [
  '{%- if tools %}<|im_start|>system\nTools: {{ tools | tojson }}<|im_end|>\n{% endif %}',
  '{%- for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content %}{{ m.content }}{% endif %}',
  '{%- if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n{{ {"name": c.function.name, "arguments": c.function.arguments} | tojson }}\n</tool_call>{% endfor %}{% endif %}',
  '<|im_end|>\n{% endfor %}',
  '{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}',
].join('');

export const WEATHER_TOOL = {
  type: 'function',
  function: { name: 'get_weather', description: 'The weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
};

export function chatGenerator(options: FakeGeneratorOptions = {}, template: string | null = CHATML): FakeGenerator {
  const generator = new FakeGenerator({ contextLength: 4096, ...options });
  if (template !== null) Object.assign(generator.tokenizer, { chatTemplates: { default: template }, templateVariables: { bos_token: '<s>', eos_token: '</s>' } });
  return generator;
}
