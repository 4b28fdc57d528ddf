// The one error of chat template rendering, apart from the engine (jinja-runtime.ts), which loads
// on first use: callers test for it without loading the engine.

/** Bad template syntax, raise_exception(msg) (message kept), continue_final_message problems, anything the renderer throws. */
export class ChatTemplateError extends Error {
  override name = 'ChatTemplateError';
}
