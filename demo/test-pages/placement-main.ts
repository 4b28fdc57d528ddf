// The engine on the page's main thread: loadModel + installFetchShim.
import { installFetchShim, loadModel } from '../../src/index.ts';
import './placement-client.ts';

const engine = loadModel('/models/stories260K/stories260K.gguf', { id: 'stories260K' });
installFetchShim(engine);

Object.assign(window, { placementReady: async () => (await engine).info.id });
