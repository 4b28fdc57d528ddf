// "Copy as curl" and "copy as openai code": the request on screen as code that runs elsewhere.
// The openai snippet runs as copied in this page's DevTools console (the fetch shim answers /v1,
// so the client needs no server; a console has no imports, so it takes the client class the page
// puts on window); curl cannot reach a page, so its snippet targets the CLI's server
// (`npx webgpu-llama serve`, 127.0.0.1:8080 by default) started with the same model and id.

/** Where `webgpu-llama serve` listens unless told otherwise (README, CLI). */
export const CLI_SERVER = 'http://127.0.0.1:8080';

/** A string as one single-quoted shell word. */
function shellQuote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}

export function curlSnippet(body: Record<string, unknown>): string {
  const model = typeof body.model === 'string' ? body.model : 'MODEL';
  return [
    `# Against the CLI's server, started with: npx webgpu-llama serve --model PATH --id ${shellQuote(model)}`,
    `curl ${body.stream ? '-N ' : ''}${CLI_SERVER}/v1/completions \\`,
    `  -H 'Content-Type: application/json' \\`,
    `  -d ${shellQuote(JSON.stringify(body, null, 2))}`,
  ].join('\n');
}

export function openaiSnippet(body: Record<string, unknown>): string {
  const request = JSON.stringify(body, null, 2).replaceAll('\n', '\n  ').trimEnd();
  const lines = [
    `// Paste into the DevTools console of the demo page: its fetch shim answers /v1, so nothing leaves the tab.`,
    `// The page puts the openai client on window; in an app: import OpenAI from 'openai';`,
    `const client = new window.OpenAI({ baseURL: location.origin + '/v1', apiKey: 'unused', dangerouslyAllowBrowser: true });`,
  ];
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
