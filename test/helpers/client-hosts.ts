// The official `openai` client connected to each host of the API: the Node server (and, when a
// key is given, the Node server requiring it) and the page's fetch shim over a target that has no
// network. close() (in afterEach) stops what the last connects started.
import OpenAI from 'openai';
import type { ApiEngines } from '../../src/api/handler.ts';
import { installFetchShim } from '../../src/api/shim.ts';
import { startServer, type RunningServer } from '../../src/node/http.ts';

export interface ClientHosts {
  /** [what, a client of that host serving `engines`]. */
  readonly hosts: readonly [string, (engines: ApiEngines) => Promise<OpenAI>][];
  close(): Promise<void>;
}

export function clientHosts(shimBase: string, options: { apiKey?: string } = {}): ClientHosts {
  const servers: RunningServer[] = [];
  const shims: (() => void)[] = [];
  const server = async (engines: ApiEngines, apiKey?: string) => {
    const running = await startServer(engines, { port: 0, log: () => {}, ...(apiKey ? { apiKeys: [apiKey] } : {}) });
    servers.push(running);
    return new OpenAI({ apiKey: apiKey ?? 'x', baseURL: `${running.url}/v1`, maxRetries: 0 });
  };
  const hosts: [string, (engines: ApiEngines) => Promise<OpenAI>][] = [['the Node server', (engines) => server(engines)]];
  const { apiKey } = options;
  if (apiKey) hosts.push(['the Node server with an API key', (engines) => server(engines, apiKey)]);
  hosts.push([
    'the fetch shim',
    async (engines) => {
      const target = { fetch: () => Promise.reject(new Error('not for the shim')) } as unknown as typeof globalThis;
      shims.push(installFetchShim(engines, { baseUrl: shimBase, target }));
      return new OpenAI({ apiKey: 'x', baseURL: shimBase, maxRetries: 0, dangerouslyAllowBrowser: true, fetch: (...args) => target.fetch(...args) });
    },
  ]);
  return {
    hosts,
    async close() {
      for (const uninstall of shims.splice(0)) uninstall();
      await Promise.all(servers.splice(0).map((s) => s.close()));
    },
  };
}
