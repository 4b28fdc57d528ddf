// The grammar layer and XGrammar imported statically, for a service worker: the HTML spec refuses
// import() there, so its entry imports this module and calls preloadStructuredOutput() before any
// request. Pages and workers load both on the first structured request instead.
import { restoreNodeGlobals } from './preload-globals.ts';
import * as xgrammarPackage from '@mlc-ai/web-xgrammar';
import * as implementation from './compile-output.ts';
import { provideStructuredOutput } from './structured-output.ts';
import { provideXGrammarPackage } from './xgrammar.ts';

/** Hands the statically imported implementation and XGrammar to structured-output.ts and xgrammar.ts. */
export function preloadStructuredOutput(): void {
  restoreNodeGlobals();
  provideXGrammarPackage(xgrammarPackage);
  provideStructuredOutput(implementation);
}
