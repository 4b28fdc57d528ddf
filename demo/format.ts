// Small text formatters shared by the demo's modules.

export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 ** 2) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 ** 3) return `${(n / 1024 ** 2).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(2)} GiB`;
}

/** A token's text as a person can read it: quoted, with whitespace and control characters escaped. */
export function visibleToken(text: string): string {
  return JSON.stringify(text);
}

/** An error of any kind as one line of text for the page. */
export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
