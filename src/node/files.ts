// Model files on the local disk (Node): a .gguf file or a Hugging Face folder.
import { open, stat } from 'node:fs/promises';
import { basename, join, resolve } from 'node:path';
import { checkRange, DEFAULT_CHUNK_SIZE, type ByteSource, type ModelFiles } from '../io/files.ts';

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

/**
 * Throws unless `path` can be a model: an existing .gguf file, or an existing folder. The error
 * names the absolute path. Loaders call it before they acquire the GPU, so that a mistyped path
 * fails at once rather than after Dawn's start-up, or as "no adapter" on a machine without a GPU.
 */
export async function checkModelPath(path: string): Promise<void> {
  const full = resolve(path);
  let info: import('node:fs').Stats;
  try {
    info = await stat(full);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code !== 'ENOENT' && code !== 'ENOTDIR') throw e; // EACCES and the like name the path already
    throw Object.assign(new Error(`no such file or directory: ${full}`), { code: 'ENOENT', path: full });
  }
  const gguf = /\.gguf$/i.test(full);
  if (gguf && !info.isFile()) throw new Error(`${full} is ${info.isDirectory() ? 'a folder' : 'not a regular file'}, not a .gguf file`);
  if (!gguf && !info.isDirectory()) {
    throw new Error(
      `${full} is neither a .gguf file nor a folder: a model is a .gguf file, or a Hugging Face folder ` +
        '(config.json, tokenizer.json, *.safetensors)',
    );
  }
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
