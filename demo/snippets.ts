// "Copy as curl" and "copy as openai code": the request on screen (a completion, or a chat turn)
// as code that runs elsewhere.
// The openai snippet runs as copied in this page's DevTools console (the fetch shim answers /v1,
// so the client needs no server; a console has no imports, so it takes the client class the page
// puts on window); curl cannot reach a page, so its snippet targets the CLI's server
// (`npx webgpu-llama serve`, 127.0.0.1:8080 by default) started with the same model and id.

/** Where `webgpu-llama serve` listens unless told otherwise (docs/placements.md, CLI). */
export const CLI_SERVER = 'http://127.0.0.1:8080';

/** A string as one single-quoted shell word. */
function shellQuote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}

/** `path`: the endpoint, '/v1/completions' or '/v1/chat/completions'. */
export function curlSnippet(body: Record<string, unknown>, path = '/v1/completions'): string {
  const model = typeof body.model === 'string' ? body.model : 'MODEL';
  return [
    `# Against the CLI's server, started with: npx webgpu-llama serve --model PATH --id ${shellQuote(model)}`,
    `curl ${body.stream ? '-N ' : ''}${CLI_SERVER}${path} \\`,
    `  -H 'Content-Type: application/json' \\`,
    `  -d ${shellQuote(JSON.stringify(body, null, 2))}`,
  ].join('\n');
}

/** The lines every openai snippet starts with: the client, made as the page's console can. */
function clientLines(): string[] {
  return [
    `// Paste into the DevTools console of the demo page: its fetch shim answers /v1, so nothing leaves the tab.`,
    `// The page puts the openai client on window; in an app: import OpenAI from 'openai';`,
    `const client = new window.OpenAI({ baseURL: location.origin + '/v1', apiKey: 'unused', dangerouslyAllowBrowser: true });`,
  ];
}

function requestText(body: Record<string, unknown>): string {
  return JSON.stringify(body, null, 2).replaceAll('\n', '\n  ').trimEnd();
}

export function openaiSnippet(body: Record<string, unknown>): string {
  const request = requestText(body);
  const lines = clientLines();
  if (body.stream) {
    lines.push(
      `const stream = await client.completions.create(${request});`,
      `// Each chunk names its choice: with n > 1 the choices' pieces come interleaved.`,
      `const texts = [];`,
      `for await (const chunk of stream) for (const choice of chunk.choices) texts[choice.index] = (texts[choice.index] ?? '') + choice.text;`,
      `console.log(texts.join('\\n---\\n'));`,
    );
  } else {
    lines.push(`const completion = await client.completions.create(${request});`, `console.log(completion.choices.map((choice) => choice.text).join('\\n---\\n'));`);
  }
  return lines.join('\n');
}

/**
 * A chat turn with `client.chat.completions.create`: it logs each choice's reply (choices
 * joined by a '---' line), and with tools, each choice's tool calls as `name(arguments)` lines.
 */
export function chatOpenaiSnippet(body: Record<string, unknown>): string {
  const request = requestText(body);
  const tools = Array.isArray(body.tools) && body.tools.length > 0;
  const lines = clientLines();
  if (body.stream) {
    lines.push(
      `const stream = await client.chat.completions.create(${request});`,
      `// Each chunk carries a piece (delta) of one choice: its text, or pieces of its tool calls.`,
      `const texts = [];`,
      ...(tools ? [`const calls = [];`] : []),
      `for await (const chunk of stream) {`,
      `  for (const choice of chunk.choices) {`,
      `    texts[choice.index] = (texts[choice.index] ?? '') + (choice.delta.content ?? '');`,
      ...(tools
        ? [
            `    for (const piece of choice.delta.tool_calls ?? []) {`,
            `      const call = ((calls[choice.index] ??= [])[piece.index] ??= { name: '', arguments: '' });`,
            `      call.name += piece.function?.name ?? '';`,
            `      call.arguments += piece.function?.arguments ?? '';`,
            `    }`,
          ]
        : []),
      `  }`,
      `}`,
      tools
        ? `console.log(texts.map((text, i) => [text, ...(calls[i] ?? []).map((c) => \`\${c.name}(\${c.arguments})\`)].join('\\n')).join('\\n---\\n'));`
        : `console.log(texts.join('\\n---\\n'));`,
    );
  } else {
    lines.push(
      `const completion = await client.chat.completions.create(${request});`,
      tools
        ? `console.log(completion.choices.map(({ message }) => [message.content ?? '', ...(message.tool_calls ?? []).map((c) => \`\${c.function.name}(\${c.function.arguments})\`)].join('\\n')).join('\\n---\\n'));`
        : `console.log(completion.choices.map((choice) => choice.message.content).join('\\n---\\n'));`,
    );
  }
  return lines.join('\n');
}

/** Copies `text`; where the Clipboard API is refused (insecure origin, no permission), selects and copies. */
export async function copyText(text: string): Promise<void> {
  try {
    await navigator.clipboard.writeText(text);
    return;
  } catch {
    // fall through to the old way
  }
  const area = Object.assign(document.createElement('textarea'), { value: text });
  area.style.position = 'fixed';
  area.style.opacity = '0';
  document.body.append(area);
  area.select();
  const ok = document.execCommand('copy');
  area.remove();
  if (!ok) throw new Error('The browser did not allow copying; select the text and copy it by hand.');
}
