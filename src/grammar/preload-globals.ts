// Node's `require` and `__filename` for XGrammar's static import in preload.ts: imported before the
// package there, so they exist while it runs; preload.ts takes them away after.
import { provideNodeGlobals } from './xgrammar.ts';

export const restoreNodeGlobals = provideNodeGlobals();
