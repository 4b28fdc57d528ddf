import { nodeGpuContext } from '../../src/node/gpu.ts';
import type { GpuContext } from '../../src/gpu/device.ts';

/** The Node test GPU (Dawn; SwiftShader on machines without a GPU). */
export function testGpu(): Promise<GpuContext> {
  return nodeGpuContext({ log: () => {} });
}
