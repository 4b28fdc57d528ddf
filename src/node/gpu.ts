// WebGPU for Node through Dawn (the `webgpu` package). On a machine without a GPU, Dawn finds
// no Vulkan adapter; Debian's chromium ships SwiftShader (Vulkan on the CPU), which we then use.
//
// `webgpu` is an optional peer dependency, loaded at the first GPU request rather than on import:
// in Node, `import 'webgpu-llama'` resolves to the Node entry, which must load (for the API handler,
// the types, a caller's own GpuContext) where Dawn is not installed.
import { existsSync } from 'node:fs';
import { errorMessage } from '../api/errors.ts';
import { acquireDevice, sharedGpuContext, type AcquireDeviceOptions, type GpuContext } from '../gpu/device.ts';

export const SWIFTSHADER_ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';

let installedGlobals = false;
/** Every GPU object Dawn gave us. Dawn's devices die (and the process with them) if the GPU
 * object that made them is garbage-collected, so they live as long as the process. */
const liveGpus: GPU[] = [];

/** The `webgpu` release the package is tested with; its peer range starts there. */
const DAWN_PACKAGE = 'webgpu@0.6.2';

/**
 * Imports Dawn (the `webgpu` package) so that its failure is one clear line: the package
 * missing, or its native binary failing to load (no build for this platform, a missing shared
 * library), which would otherwise surface as a stack trace from deep inside the load.
 */
export async function loadDawn(importDawn: () => Promise<unknown> = () => import('webgpu')): Promise<void> {
  try {
    await importDawn();
  } catch (err) {
    const message = errorMessage(err);
    if ((err as { code?: string }).code === 'ERR_MODULE_NOT_FOUND' && /['"]webgpu['"]/.test(message)) {
      throw new Error(`the Node host needs the \`webgpu\` package (Dawn): npm install ${DAWN_PACKAGE}`);
    }
    // Node's "Cannot find module" message goes on with the require stack: the first line says it.
    throw new Error(
      `the \`webgpu\` package (Dawn) failed to load: ${message.split('\n')[0]} ` +
        `(reinstall it, npm install ${DAWN_PACKAGE}, on a platform it has a build for: linux, macOS or Windows, x64 or arm64)`,
    );
  }
}

/** A `GPU` object for Node, falling back to SwiftShader when Dawn finds no adapter. */
export async function createNodeGpu(options: { log?: (message: string) => void } = {}): Promise<GPU> {
  let dawn: typeof import('webgpu') | undefined;
  await loadDawn(async () => (dawn = await import('webgpu')));
  const { create, globals } = dawn!;
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
