// WebGPU for Node through Dawn (the `webgpu` package). On a machine without a GPU, Dawn finds
// no Vulkan adapter; Debian's chromium ships SwiftShader (Vulkan on the CPU), which we then use.
//
// `webgpu` is an optional peer dependency, loaded at the first GPU request rather than on import:
// in Node, `import 'webgpu-llama'` resolves to the Node entry, which must load (for the API handler,
// the types, a caller's own GpuContext) where Dawn is not installed.
import { existsSync } from 'node:fs';
import { acquireDevice, sharedGpuContext, type AcquireDeviceOptions, type GpuContext } from '../gpu/device.ts';

export const SWIFTSHADER_ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';

let installedGlobals = false;
/** Every GPU object Dawn gave us. Dawn's devices die (and the process with them) if the GPU
 * object that made them is garbage-collected, so they live as long as the process. */
const liveGpus: GPU[] = [];

/** A `GPU` object for Node, falling back to SwiftShader when Dawn finds no adapter. */
export async function createNodeGpu(options: { log?: (message: string) => void } = {}): Promise<GPU> {
  const { create, globals } = await import('webgpu');
  if (!installedGlobals) {
    // Dawn's constants (GPUBufferUsage, GPUShaderStage, ...) as in a browser.
    Object.assign(globalThis, globals);
    installedGlobals = true;
  }
  let gpu = create([]) as GPU;
  liveGpus.push(gpu);
  if (await gpu.requestAdapter()) return gpu;
  if (!process.env.VK_ICD_FILENAMES && existsSync(SWIFTSHADER_ICD)) {
    process.env.VK_ICD_FILENAMES = SWIFTSHADER_ICD;
    gpu = create([]) as GPU;
    liveGpus.push(gpu);
    if (await gpu.requestAdapter()) {
      (options.log ?? ((m) => process.stderr.write(m + '\n')))(
        `webgpu-llama: no GPU adapter found; using SwiftShader (CPU) from ${SWIFTSHADER_ICD}`,
      );
      return gpu;
    }
  }
  throw new Error(
    'No WebGPU adapter found. Install a Vulkan driver, or Debian\'s chromium (which ships SwiftShader) ' +
      'and libvulkan1, or set VK_ICD_FILENAMES.',
  );
}

type NodeGpuOptions = AcquireDeviceOptions & { log?: (message: string) => void };
const shared = sharedGpuContext((options: NodeGpuOptions) => createNodeGpu(options).then((gpu) => acquireDevice(gpu, options)));

/**
 * One device per process, shared by everything in it (tests, CLI, server); a new one once it is
 * lost. `options` count when a device is acquired: at the first call, and after a loss.
 */
export function nodeGpuContext(options: NodeGpuOptions = {}): Promise<GpuContext> {
  return shared(options);
}
