// One request on the GPU at a time, the rest wait in a bounded FIFO queue. A waiting request
// whose signal aborts leaves the queue; a full queue refuses new requests at once.

export class QueueFullError extends Error {
  constructor(readonly limit: number) {
    super(`too many requests waiting (limit ${limit}); try again later`);
    this.name = 'QueueFullError';
  }
}

export function abortError(signal?: AbortSignal): Error {
  const reason = signal?.reason;
  if (reason instanceof Error && reason.name === 'AbortError') return reason;
  const error = new Error('the request was aborted');
  error.name = 'AbortError';
  return error;
}

interface Waiter {
  grant: () => void;
}

export class Scheduler {
  private busy = false;
  private readonly waiting: Waiter[] = [];

  constructor(readonly maxQueued = 64) {}

  get queued(): number {
    return this.waiting.length;
  }

  /** Resolves with a release function once this caller owns the GPU. */
  acquire(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(abortError(signal));
    if (!this.busy) {
      this.busy = true;
      return Promise.resolve(this.releaser());
    }
    if (this.waiting.length >= this.maxQueued) return Promise.reject(new QueueFullError(this.maxQueued));
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        grant: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve(this.releaser());
        },
      };
      const onAbort = () => {
        const i = this.waiting.indexOf(waiter);
        if (i >= 0) this.waiting.splice(i, 1);
        reject(abortError(signal));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(waiter);
    });
  }

  /** The GPU now if it is free and no one waits for it (a release function), else undefined. */
  tryAcquire(): (() => void) | undefined {
    if (this.busy || this.waiting.length > 0) return undefined;
    this.busy = true;
    return this.releaser();
  }

  private releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiting.shift();
      if (next) next.grant();
      else this.busy = false;
    };
  }
}
