// How the browser tests and the bench launch Chromium with WebGPU on any Linux machine.
// Debian's chromium ships SwiftShader, so WebGPU runs (on the CPU) even without a GPU.

/** The system Chromium (Debian's `chromium` package); override with CHROMIUM_PATH. */
export const CHROMIUM_PATH = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/**
 * The flags that give a headless Chromium a WebGPU adapter. `--enable-unsafe-webgpu` is the one
 * that matters on Linux (WebGPU is not on by default there); with no GPU, Chromium then falls
 * back to SwiftShader by itself. `--no-sandbox` because CI runs as root (Playwright adds it
 * too, unless chromiumSandbox is set).
 */
export const WEBGPU_ARGS = ['--enable-unsafe-webgpu', '--no-sandbox'];
