/**
 * What the preview tool tests share: bounds, a working folder whose `tmp/` is the tools' TMPDIR (checked
 * empty after each test, with no tool process left over), and the PreviewError a promise rejects with.
 */
import { mkdirSync, readdirSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, afterEach, beforeAll, expect } from 'vitest'
import { type PreviewBounds, PreviewError } from '../media/preview-tools.js'
import { toolChildren } from './video-kit.js'

/** Bounds of a tool test: generous ones, with `overrides`. */
export function previewBounds(overrides: Partial<PreviewBounds> = {}): PreviewBounds {
  return {
    maxInputPixels: 100_000_000,
    maxPages: 10_000,
    maxDurationSeconds: 86_400,
    timeoutSeconds: 30,
    maxSide: 1024,
    memoryBytes: 1024 * 1024 * 1024,
    ...overrides,
  }
}

/**
 * Registers the suite's hooks: a working folder made before all tests (`dir()`), its `tmp/` the tools'
 * TMPDIR; after each test that folder is empty and none of `tools` still runs; after all, both go.
 */
export function useToolFolder(prefix: string, tools: string[]): { dir: () => string } {
  let dir = ''
  let toolTmp = ''
  const savedTmp = process.env.TMPDIR
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), prefix))
    toolTmp = join(dir, 'tmp')
    mkdirSync(toolTmp)
    process.env.TMPDIR = toolTmp
  })
  afterAll(async () => {
    process.env.TMPDIR = savedTmp
    if (savedTmp === undefined) delete process.env.TMPDIR
    await rm(dir, { recursive: true, force: true })
  })
  afterEach(() => {
    expect(readdirSync(toolTmp)).toEqual([])
    // Every tool run is over and reaped, one stopped by another's refusal too.
    expect(toolChildren(tools)).toEqual([])
  })
  return { dir: () => dir }
}

/** The PreviewError `p` rejects with (the test fails when it resolves or rejects with anything else). */
export async function previewFailure(p: Promise<unknown>): Promise<PreviewError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(PreviewError)
  return err as PreviewError
}
