// Node module hook: `import src from './x.wgsl?raw'` yields the file's text, as Vite does.
import { readFile } from 'node:fs/promises';

export async function load(url, context, nextLoad) {
  if (url.startsWith('file:') && url.includes('.wgsl?raw')) {
    const fileUrl = new URL(url);
    fileUrl.search = '';
    const text = await readFile(fileUrl, 'utf8');
    return { format: 'module', source: `export default ${JSON.stringify(text)};`, shortCircuit: true };
  }
  return nextLoad(url, context);
}
