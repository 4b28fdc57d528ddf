// Bounds on the tokenizer files of a model (tokenizer.json, a GGUF's tokenizer.ggml.* keys),
// checked before a tokenizer is built from them: a file nobody read could otherwise ask for a
// vocabulary that fills the memory or a merge derivation that runs for hours. Real models sit
// far below them (Qwen2: 151,643 tokens and 151,387 merges; Llama 3: 280,147 merges; pieces of
// at most 128 characters).

export const TOKENIZER_LIMITS = {
  /** Tokens in the vocabulary. */
  vocabulary: 1024 * 1024,
  /** BPE merges. */
  merges: 2 * 1024 * 1024,
  /** Added (special and user-defined) tokens. */
  addedTokens: 1024 * 1024,
  /** Characters of one token (a vocabulary piece, a side of a merge, an added token). */
  tokenLength: 1024,
  /** The sum over pieces of their length squared: what deriving SentencePiece merges from a GGUF costs. */
  sentencePieceWork: 64 * 1024 * 1024,
};

function refuse(where: string, what: string, count: number, limit: number): never {
  throw new Error(`${where}: ${what} ${count}, over the limit of ${limit} (the tokenizer files are not those of a real model)`);
}

function checkCount(where: string, what: string, count: number, limit: number): void {
  if (count > limit) refuse(where, what, count, limit);
}

function checkToken(where: string, token: unknown, what: string): void {
  if (typeof token === 'string' && token.length > TOKENIZER_LIMITS.tokenLength) {
    refuse(where, `${what} ${JSON.stringify(token.slice(0, 20) + '…')} has a length of`, token.length, TOKENIZER_LIMITS.tokenLength);
  }
}

/** Throws unless the vocabulary, merges and added tokens of a tokenizer.json are within TOKENIZER_LIMITS. */
export function checkTokenizerJson(json: Record<string, unknown>, where = 'tokenizer.json'): void {
  const model = (json.model ?? {}) as Record<string, unknown>;
  const vocab = model.vocab;
  // BPE and WordPiece: {piece: id}; Unigram: [[piece, score], ...].
  const pieces = Array.isArray(vocab) ? vocab.map((entry) => (Array.isArray(entry) ? entry[0] : entry)) : vocab && typeof vocab === 'object' ? Object.keys(vocab) : [];
  checkCount(where, 'the vocabulary has a size of', pieces.length, TOKENIZER_LIMITS.vocabulary);
  for (const piece of pieces) checkToken(where, piece, 'the token');
  const merges = Array.isArray(model.merges) ? (model.merges as unknown[]) : [];
  checkCount(where, 'the number of merges is', merges.length, TOKENIZER_LIMITS.merges);
  for (const merge of merges) {
    if (Array.isArray(merge)) for (const side of merge) checkToken(where, side, 'a merge of');
    else if (typeof merge === 'string' && merge.length > 2 * TOKENIZER_LIMITS.tokenLength + 1) checkToken(where, merge, 'the merge');
  }
  const added = Array.isArray(json.added_tokens) ? (json.added_tokens as { content?: unknown }[]) : [];
  checkCount(where, 'the number of added tokens is', added.length, TOKENIZER_LIMITS.addedTokens);
  for (const token of added) checkToken(where, token?.content, 'the added token');
}

/** Throws unless a GGUF's tokens and merges are within TOKENIZER_LIMITS. */
export function checkGgufVocabulary(tokens: readonly string[], merges: readonly unknown[] | undefined): void {
  const where = 'GGUF tokenizer.ggml.tokens';
  checkCount(where, 'the vocabulary has a size of', tokens.length, TOKENIZER_LIMITS.vocabulary);
  for (const token of tokens) checkToken(where, token, 'the token');
  if (merges === undefined) return;
  checkCount('GGUF tokenizer.ggml.merges', 'the number of merges is', merges.length, TOKENIZER_LIMITS.merges);
  for (const merge of merges) {
    if (typeof merge === 'string' && merge.length > 2 * TOKENIZER_LIMITS.tokenLength + 1) checkToken('GGUF tokenizer.ggml.merges', merge, 'the merge');
  }
}

/** Throws unless deriving SentencePiece merges from these pieces (every split of every piece) stays within the bound. */
export function checkSentencePieceWork(tokens: readonly string[]): void {
  let work = 0;
  for (const token of tokens) work += token.length * token.length;
  checkCount('GGUF tokenizer.ggml.tokens', 'deriving the merges would take (characters copied)', work, TOKENIZER_LIMITS.sentencePieceWork);
}
