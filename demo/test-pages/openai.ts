// Driven by test/browser/openai-client.spec.ts: loads stories260K onto the page's GPU and installs
// the fetch shim, as an application would, and puts the official `openai` client class on window
// so that the spec can use it in the page exactly as application code does:
//   new OpenAI({ apiKey: 'unused', baseURL: location.origin + '/v1', dangerouslyAllowBrowser: true })
// (no custom fetch: the client calls the page's fetch, which the shim answers).
import OpenAI from 'openai';
import { installFetchShim, loadModel } from '../../src/index.ts';

const enginePromise = loadModel('/models/stories260K/stories260K.gguf', { id: 'stories260K' });
installFetchShim(enginePromise);

/** Resolves with the model id once it is loaded (rejects with the load error). */
async function openaiReady(): Promise<string> {
  return (await enginePromise).info.id;
}

Object.assign(window, { OpenAI, openaiReady });
