// What the rest of the runtime needs from a tokenizer, whatever file it was built from.

export interface TextTokenizer {
  readonly vocabSize: number;
  /** Beginning-of-sequence id, or null when the model has none. */
  readonly bosId: number | null;
  /** Ids that end generation (`</s>`, `<|eot_id|>`, ...). */
  readonly eosIds: readonly number[];
  /** Whether prompts get BOS prepended (tokenizer_config `add_bos_token` / GGUF `tokenizer.ggml.add_bos_token`). */
  readonly addBos: boolean;
  /**
   * Ids the tokenizer appends after a text when it adds its special tokens (a tokenizer.json
   * post_processor's suffix: Qwen3-Embedding's <|endoftext|>). Generation never appends them;
   * embeddings do, as the model was trained. Absent or empty: none.
   */
  readonly suffixIds?: readonly number[];
  /** Text -> ids. BOS is prepended when `addBos` (overridable per call); special tokens in `text` are parsed. */
  encode(text: string, options?: { addBos?: boolean }): number[];
  /** Ids -> text, byte tokens fused into UTF-8. Incomplete UTF-8 at the end decodes to U+FFFD. */
  decode(ids: readonly number[], options?: { skipSpecialTokens?: boolean }): string;
  /** Whether an id is a special/control token (BOS, EOS, ...). */
  isSpecial(id: number): boolean;
  /** The bytes a token stands for (token-bytes.ts); undefined for an id the vocabulary lacks. */
  tokenBytes?(id: number): Uint8Array | undefined;
  /**
   * The model's chat templates by name ('default', 'tool_use', ...; see pickChatTemplate in
   * chat-template.ts); absent or empty when the model has none.
   */
  readonly chatTemplates?: Readonly<Record<string, string>>;
  /**
   * transformers' special_tokens_map, the variables a chat template sees besides the conversation:
   * bos_token, eos_token, unk_token, pad_token, ... as their text (those the model sets), and
   * additional_special_tokens (a list) when the config has it.
   */
  readonly templateVariables?: Readonly<Record<string, unknown>>;
}
