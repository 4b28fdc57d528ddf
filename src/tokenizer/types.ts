// What the rest of the runtime needs from a tokenizer, whatever file it was built from.

export interface TextTokenizer {
  readonly vocabSize: number;
  /** Beginning-of-sequence id, or null when the model has none. */
  readonly bosId: number | null;
  /** Ids that end generation (`</s>`, `<|eot_id|>`, ...). */
  readonly eosIds: readonly number[];
  /** Whether prompts get BOS prepended (tokenizer_config `add_bos_token` / GGUF `tokenizer.ggml.add_bos_token`). */
  readonly addBos: boolean;
  /** Text -> ids. BOS is prepended when `addBos` (overridable per call); special tokens in `text` are parsed. */
  encode(text: string, options?: { addBos?: boolean }): number[];
  /** Ids -> text, byte tokens fused into UTF-8. Incomplete UTF-8 at the end decodes to U+FFFD. */
  decode(ids: readonly number[], options?: { skipSpecialTokens?: boolean }): string;
  /** Whether an id is a special/control token (BOS, EOS, ...). */
  isSpecial(id: number): boolean;
}
