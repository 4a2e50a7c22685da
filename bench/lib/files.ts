/** Generated inputs of the benchmark, made once per run in the scratch directory. */
import { randomBytes } from 'node:crypto'
import { createWriteStream, type Dirent, existsSync } from 'node:fs'
import { readdir, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import sharp, { type Sharp } from 'sharp'

/** A file of `size` bytes: a 4 MiB block of random bytes repeated (incompressible at any window size). */
export async function bigFile(dir: string, size: number): Promise<string> {
  const path = join(dir, `big-${size}.bin`)
  if (existsSync(path)) return path
  const block = randomBytes(4 * 1024 * 1024)
  const out = createWriteStream(path)
  for (let left = size; left > 0; left -= block.length) {
    const chunk = left >= block.length ? block : block.subarray(0, left)
    if (!out.write(chunk)) await new Promise<void>((r) => out.once('drain', () => r()))
  }
  await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())))
  return path
}

let tinyJpeg: Buffer | undefined

/**
 * A real JPEG of exactly `size` bytes: a small valid image followed by random bytes after its end marker.
 * Content sniffing sees image/jpeg (so the server treats it as an already-compressed image, as it would a
 * photo), and the bytes do not compress.
 */
export async function paddedJpeg(path: string, size: number): Promise<string> {
  tinyJpeg ??= await sharp({ create: { width: 64, height: 48, channels: 3, background: { r: 30, g: 120, b: 200 } } })
    .jpeg({ quality: 80 })
    .toBuffer()
  if (size < tinyJpeg.length) throw new Error(`a padded JPEG needs at least ${tinyJpeg.length} bytes`)
  await writeFile(path, Buffer.concat([tinyJpeg, randomBytes(size - tinyJpeg.length)]))
  return path
}

/**
 * A photo-like JPEG (smooth random colour fields with fine grain, quality 85): about 3.4 MB at 4000×3000,
 * which is what a camera gives.
 */
export async function photoJpeg(path: string, width: number, height: number): Promise<string> {
  if (existsSync(path)) return path
  await (await photoPipeline(width, height)).jpeg({ quality: 85 }).toFile(path)
  return path
}

/** A photo-like picture (smooth colour fields with grain of `grain` sigma), as a sharp pipeline to encode. */
export async function photoPipeline(width: number, height: number, grain = 12): Promise<Sharp> {
  const coarse = await sharp({
    create: {
      width: Math.ceil(width / 10),
      height: Math.ceil(height / 10),
      channels: 3,
      background: '#808080',
      noise: { type: 'gaussian', mean: 128, sigma: 60 },
    },
  })
    .png()
    .toBuffer()
  const noise = {
    create: { width, height, channels: 3 as const, background: '#808080', noise: { type: 'gaussian' as const, mean: 128, sigma: grain } },
  }
  return sharp(coarse)
    .resize(width, height, { kernel: 'cubic', fit: 'fill' })
    .composite([{ input: noise, blend: 'overlay' }])
}

/** Removes every file under `dir` (recursively), leaving the folders. */
export async function removeFiles(dir: string): Promise<void> {
  let entries: Dirent[]
  try {
    entries = await readdir(dir, { withFileTypes: true, recursive: true })
  } catch {
    return
  }
  for (const e of entries) if (e.isFile()) await rm(join(e.parentPath ?? e.path, e.name), { force: true })
}

/** Every file under `dir`, recursively, as paths relative to nothing (absolute). */
export async function listFiles(dir: string): Promise<string[]> {
  try {
    const entries = await readdir(dir, { withFileTypes: true, recursive: true })
    return entries.filter((e) => e.isFile()).map((e) => join(e.parentPath ?? e.path, e.name))
  } catch {
    return []
  }
}
