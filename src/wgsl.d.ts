// WGSL sources are imported as strings: Vite does it natively (`?raw`); under Node,
// bin/wgsl-loader.mjs does the same so the CLI and the bench need no build step.
declare module '*.wgsl?raw' {
  const source: string;
  export default source;
}
