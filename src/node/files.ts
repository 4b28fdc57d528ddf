// Model files on the local disk (Node): a .gguf file or a Hugging Face folder.
import { open, stat } from 'node:fs/promises';
import { basename, join, resolve } from 'node:path';
import { checkRange, DEFAULT_CHUNK_SIZE, type ByteSource, type ModelFiles } from '../model/files.ts';

/** A `.gguf` file, or a folder holding config.json, tokenizer.json, *.safetensors, ... */
export function filesFromPath(path: string): ModelFiles {
  const full = resolve(path);
  if (/\.gguf$/i.test(full)) {
    const fileName = basename(full);
    return {
      id: fileName.replace(/\.gguf$/i, ''),
      ggufFile: fileName,
      async open(name) {
        return name === fileName ? pathSource(full, fileName) : null;
      },
    };
  }
  return {
    id: basename(full),
    async open(name) {
      return pathSource(join(full, name), name);
    },
  };
}

async function pathSource(path: string, name: string): Promise<ByteSource | null> {
  let size: number;
  try {
    const info = await stat(path);
    if (!info.isFile()) return null;
    size = info.size;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT' || (e as NodeJS.ErrnoException).code === 'ENOTDIR') return null;
    throw e;
  }
  return {
    name,
    size,
    async read(offset, length) {
      checkRange(name, size, offset, length);
      const out = new Uint8Array(length);
      const handle = await open(path, 'r');
      try {
        await readFully(handle, out, offset, name);
      } finally {
        await handle.close();
      }
      return out;
    },
    async *stream(offset, length, chunkSize = DEFAULT_CHUNK_SIZE) {
      checkRange(name, size, offset, length);
      const handle = await open(path, 'r');
      try {
        for (let at = offset; at < offset + length; at += chunkSize) {
          const chunk = new Uint8Array(Math.min(chunkSize, offset + length - at));
          await readFully(handle, chunk, at, name);
          yield chunk;
        }
      } finally {
        await handle.close();
      }
    },
  };
}

async function readFully(handle: import('node:fs/promises').FileHandle, out: Uint8Array, position: number, name: string): Promise<void> {
  let done = 0;
  while (done < out.length) {
    const { bytesRead } = await handle.read(out, done, out.length - done, position + done);
    if (bytesRead === 0) throw new Error(`${name}: the file ended early (read ${done} of ${out.length} bytes at ${position})`);
    done += bytesRead;
  }
}
