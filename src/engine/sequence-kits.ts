// The samplers and read-back buffers sequences decode with (a SequenceKit each): a sampler state
// for every sequence that may decode at once, in as few SamplerBanks as the device's buffers
// allow, so that the batch samples each bank's rows together (batch-decode.ts). A kit is taken
// with a decode slot and given back before the slot, so there are never more in use than slots.
import type { GpuContext } from '../gpu/device.ts';
import { GpuSampler, RECORD_BYTES } from '../sampling/gpu-sampler.ts';
import { SamplerBank } from '../sampling/sampler-bank.ts';
import type { SequenceKit } from './session.ts';

export class SequenceKits {
  private readonly free: SequenceKit[] = [];
  private readonly all: SequenceKit[] = [];
  private readonly banks: SamplerBank[] = [];

  constructor(
    private readonly ctx: GpuContext,
    /** The ids tokens are sampled among. */
    private readonly vocabSize: number,
    /** Record slots per sampler and read-back buffer: the most tokens a round takes. */
    private readonly recordSlots: number,
  ) {}

  /** Makes kits up to `count` (the decode slots' limit); taken in order, the first bank's first state first. */
  async fill(count: number): Promise<void> {
    const perBank = SamplerBank.maxStates(this.ctx.limits, this.vocabSize, this.recordSlots);
    for (let made = this.banks.reduce((n, bank) => n + bank.states, 0); made < count; ) {
      const bank = await SamplerBank.create(this.ctx, this.vocabSize, { states: Math.min(perBank, count - made), recordSlots: this.recordSlots });
      this.banks.push(bank);
      made += bank.states;
      for (let state = 0; state < bank.states; state++) this.free.push(this.make(new GpuSampler(bank, state)));
    }
    const order = (kit: SequenceKit) => this.banks.indexOf(kit.sampler.bank) * count + kit.sampler.state;
    this.free.sort((a, b) => order(b) - order(a));
  }

  /** The first kit made (tests and measurements). */
  get first(): SequenceKit {
    const kit = this.all[0];
    if (!kit) throw new Error('no kit has been made');
    return kit;
  }

  /** A free kit; beyond those filled (never, as long as kits are taken with slots), one with a sampler of its own, sampled alone. */
  async take(): Promise<SequenceKit> {
    return this.free.pop() ?? this.make(await GpuSampler.create(this.ctx, this.vocabSize, { recordSlots: this.recordSlots }));
  }

  give(kit: SequenceKit): void {
    this.free.push(kit);
  }

  /** Frees every kit's buffers and the banks (once the GPU is done with them). */
  destroy(): void {
    for (const kit of this.all) {
      kit.sampler.destroy();
      for (const b of kit.staging) b.destroy();
    }
    for (const bank of this.banks) bank.destroy();
  }

  private make(sampler: GpuSampler): SequenceKit {
    const { device } = this.ctx;
    const staging = () =>
      device.createBuffer({ label: 'decode_records_readback', size: this.recordSlots * RECORD_BYTES, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const kit: SequenceKit = { sampler, staging: [staging(), staging()] };
    this.all.push(kit);
    return kit;
  }
}
