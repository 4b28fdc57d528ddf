// The decode slots' free list (LlamaGenerator's): who takes a slot, who waits for one, and the
// slots made on first use (where each slot is a KvCache of its own), one at a time.
import type { DecodeSlots } from './decode-slots.ts';

/** A session keeping idle slots for its next sequence: it gives them back when someone waits for one. */
export interface IdleSlotHolder {
  giveBackIdle(): void;
}

export class SlotPool {
  private readonly freeSlots: number[] = [];
  /** Who waits for a free slot (the admitted request, sessions' sequences), all woken when one is freed. */
  private readonly waiters = new Set<() => void>();
  private readonly idleHolders = new Set<IdleSlotHolder>();
  /** The slot being made (make): one at a time, so an out-of-memory error names its own. */
  private making: Promise<unknown> = Promise.resolve();
  private slots: DecodeSlots | undefined;
  private closed = false;

  constructor(
    private readonly device: GPUDevice,
    /** Slots there may be: the sequences asked for, lowered by the slots' own limit and by a slot the GPU could not allocate. */
    public limit: number,
  ) {}

  /** The slots the pool hands out (once made: LlamaGenerator.prepare). */
  attach(slots: DecodeSlots): void {
    this.slots = slots;
    this.limit = Math.min(this.limit, slots.limit);
  }

  /** Slots free now. */
  get free(): number {
    return this.freeSlots.length;
  }

  /** A slot made and free for the first time. */
  add(slot: number): void {
    this.freeSlots.push(slot);
  }

  /**
   * Up to `count` slots for the admitted request: as many as are free once one is (a request does
   * not wait for others to free all it could use; its other sequences take slots as they free). A
   * slot is made when too few are free and fewer than the limit exist; one the GPU cannot allocate
   * lowers the limit. `checkLive` throws to stop waiting (an abort, an unload).
   */
  async take(count: number, signal: AbortSignal | undefined, checkLive: () => void): Promise<number[]> {
    for (;;) {
      checkLive();
      while (this.freeSlots.length < count && this.made() < this.limit) {
        if (!(await this.make())) break;
      }
      if (this.limit < 1) throw new Error('no memory for a decode slot');
      if (this.freeSlots.length > 0) return this.freeSlots.splice(0, Math.min(count, this.freeSlots.length));
      await this.freedOrAborted(signal).freed;
    }
  }

  /** A free slot now (made if none is free and the limit allows), or undefined. */
  async takeFree(): Promise<number | undefined> {
    if (this.closed) return undefined;
    if (this.freeSlots.length === 0 && this.made() < this.limit) await this.make();
    return this.freeSlots.shift();
  }

  /**
   * `freed` resolves once a slot is free (at once if one is), the signal aborts or the pool is
   * closed; `cancel` stops waiting. Sessions keeping idle slots give them back.
   */
  freedOrAborted(signal: AbortSignal | undefined): { freed: Promise<void>; cancel: () => void } {
    let cancel!: () => void;
    const freed = new Promise<void>((resolve) => {
      const done = () => {
        signal?.removeEventListener('abort', done);
        this.waiters.delete(done);
        resolve();
      };
      cancel = done;
      signal?.addEventListener('abort', done, { once: true });
      this.waiters.add(done);
      if (this.closed || this.freeSlots.length > 0) done();
      for (const holder of [...this.idleHolders]) holder.giveBackIdle();
    });
    return { freed, cancel };
  }

  /** Whether someone waits for a slot. */
  get wanted(): boolean {
    return this.waiters.size > 0;
  }

  /** A session keeps idle slots (true) or no longer does (false). */
  holdsIdle(holder: IdleSlotHolder, holds: boolean): void {
    if (holds) this.idleHolders.add(holder);
    else this.idleHolders.delete(holder);
  }

  /** Gives a slot back (its GPU work is done or queued ahead of any later use) and wakes the waiters. */
  release(slot: number): void {
    this.freeSlots.push(slot);
    for (const wake of [...this.waiters]) wake();
  }

  /** Wakes every waiter for good (the generator is unloaded). */
  close(): void {
    this.closed = true;
    for (const wake of [...this.waiters]) wake();
  }

  private made(): number {
    return this.slots?.made() ?? 0;
  }

  /** Makes another slot, one call after another; false (and the limit lowered) when there is none to make or the GPU cannot allocate it. */
  private make(): Promise<boolean> {
    const made = this.making.then(() => this.makeNow());
    this.making = made.catch(() => {});
    return made;
  }

  private async makeNow(): Promise<boolean> {
    const slots = this.slots;
    if (!slots || slots.made() >= this.limit) return false;
    const made = slots.made();
    this.device.pushErrorScope('out-of-memory');
    const ok = slots.make();
    const error = await this.device.popErrorScope();
    if (!ok || error) {
      if (error) {
        // The slot made last is `made` (slots are numbered in the order they are made).
        slots.caches.pop()?.destroy();
        const i = this.freeSlots.indexOf(made);
        if (i >= 0) this.freeSlots.splice(i, 1);
      }
      this.limit = made;
      return false;
    }
    return true;
  }
}
