// The GPU queue (src/engine/scheduler.ts): one owner at a time, waiters granted in FIFO order, an
// aborted waiter leaves the queue without disturbing the others, a full queue refuses at once.
import { describe, expect, it } from 'vitest';
import { QueueFullError, Scheduler, abortError } from '../../src/engine/scheduler.ts';

/** Acquires and records, in `order`, the label of each caller as it is granted the GPU. */
function acquireAs(scheduler: Scheduler, label: string, order: string[], signal?: AbortSignal): Promise<() => void> {
  return scheduler.acquire(signal).then((release) => {
    order.push(label);
    return release;
  });
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 0));

describe('Scheduler', () => {
  it('grants the GPU at once when idle, then to waiters one at a time in arrival order', async () => {
    const scheduler = new Scheduler();
    const order: string[] = [];
    const first = await acquireAs(scheduler, 'a', order);
    const b = acquireAs(scheduler, 'b', order);
    const c = acquireAs(scheduler, 'c', order);
    await settle();
    expect(order).toEqual(['a']);
    expect(scheduler.queued).toBe(2);

    first();
    const releaseB = await b;
    await settle();
    expect(order).toEqual(['a', 'b']);
    expect(scheduler.queued).toBe(1);

    releaseB();
    const releaseC = await c;
    expect(order).toEqual(['a', 'b', 'c']);
    expect(scheduler.queued).toBe(0);
    releaseC();

    // Idle again: the next caller is granted without waiting.
    const d = await scheduler.acquire();
    d();
  });

  it('ignores a second call of the same release function', async () => {
    const scheduler = new Scheduler();
    const order: string[] = [];
    const release = await acquireAs(scheduler, 'a', order);
    const b = acquireAs(scheduler, 'b', order);
    const c = acquireAs(scheduler, 'c', order);
    release();
    release(); // must not grant c while b holds the GPU
    await b;
    await settle();
    expect(order).toEqual(['a', 'b']);
    expect(scheduler.queued).toBe(1);
    void c;
  });

  it('refuses a new waiter with QueueFullError when maxQueued are already waiting', async () => {
    const scheduler = new Scheduler(2);
    const release = await scheduler.acquire();
    const waiting = [scheduler.acquire(), scheduler.acquire()];
    const refused = scheduler.acquire();
    await expect(refused).rejects.toBeInstanceOf(QueueFullError);
    await expect(refused).rejects.toMatchObject({ limit: 2, message: expect.stringMatching(/limit 2/) });
    expect(scheduler.queued).toBe(2);
    release();
    (await waiting[0])();
    (await waiting[1])();
  });

  it('drops a waiter whose signal aborts, rejecting it with an AbortError, and grants the next one', async () => {
    const scheduler = new Scheduler();
    const order: string[] = [];
    const release = await acquireAs(scheduler, 'a', order);
    const controller = new AbortController();
    const b = acquireAs(scheduler, 'b', order, controller.signal);
    const c = acquireAs(scheduler, 'c', order);
    controller.abort();
    await expect(b).rejects.toMatchObject({ name: 'AbortError' });
    expect(scheduler.queued).toBe(1);
    release();
    (await c)();
    expect(order).toEqual(['a', 'c']);
  });

  it('rejects at once for an already-aborted signal, without queueing or taking the GPU', async () => {
    const scheduler = new Scheduler();
    const controller = new AbortController();
    controller.abort();
    await expect(scheduler.acquire(controller.signal)).rejects.toMatchObject({ name: 'AbortError' });
    expect(scheduler.queued).toBe(0);
    const release = await scheduler.acquire(); // still idle
    release();
  });

  it('an abort after the grant does not affect the owner or the queue', async () => {
    const scheduler = new Scheduler();
    const controller = new AbortController();
    const release = await scheduler.acquire(controller.signal);
    const order: string[] = [];
    const b = acquireAs(scheduler, 'b', order);
    controller.abort();
    await settle();
    expect(scheduler.queued).toBe(1);
    release();
    (await b)();
    expect(order).toEqual(['b']);
  });
});

describe('abortError', () => {
  it("passes on the signal's own AbortError reason, and otherwise makes one", () => {
    const controller = new AbortController();
    controller.abort();
    expect(abortError(controller.signal)).toBe(controller.signal.reason);

    const custom = new AbortController();
    custom.abort(new Error('not an abort'));
    const made = abortError(custom.signal);
    expect(made.name).toBe('AbortError');
    expect(made).not.toBe(custom.signal.reason);
    expect(abortError().name).toBe('AbortError');
  });
});
